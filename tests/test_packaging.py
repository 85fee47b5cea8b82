"""pyproject.toml installs every package folder of the repository under its fedpub name, with the YAML files the
commands read (a folder missing from the explicit list would be absent from a wheel, not from this checkout)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib comes with Python 3.11")
ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def folder_of(package: str) -> Path:
    """The repository folder that pyproject's package-dir maps the package to."""
    parts = package.split(".")
    for depth in range(len(parts), 0, -1):
        mapped = SETUPTOOLS["package-dir"].get(".".join(parts[:depth]))
        if mapped:
            return ROOT.joinpath(mapped, *parts[depth:])
    return ROOT.joinpath(*parts)


def test_every_package_folder_is_installed_under_its_fedpub_name():
    folders = {
        path.parent for top in ("fedpub", "strategies", "clients", "simulations")
        for path in (ROOT / top).rglob("*") if path.suffix in {".py", ".yaml"} and "__pycache__" not in path.parts
    }
    listed = {folder_of(package) for package in SETUPTOOLS["packages"]}
    assert folders - listed == set(), "package folders missing from [tool.setuptools] packages"
    assert all(folder.is_dir() for folder in listed)


def test_every_yaml_file_is_package_data():
    data = SETUPTOOLS["package-data"]
    shipped = {
        path for package, patterns in data.items() for pattern in patterns for path in folder_of(package).glob(pattern)
    }
    yaml_files = {path for top in ("simulations",) for path in (ROOT / top).rglob("*.yaml")}
    assert yaml_files == shipped


def test_the_wheel_holds_every_module_and_config_under_its_fedpub_name_and_runs_from_it(tmp_path: Path):
    """The built wheel (as ``pip install fedpub`` from an index gets it), unpacked alone on the path of a folder
    outside the repository: its modules import from it and the bundled configs are found in it."""
    source, dist, unpacked = tmp_path / "source", tmp_path / "dist", tmp_path / "site"
    for name in ("pyproject.toml", "README.md"):  # a copy: the build writes build/ and *.egg-info beside its sources
        (source / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, source / name)
    for top in ("fedpub", "strategies", "clients", "simulations"):
        shutil.copytree(ROOT / top, source / top, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(source)],
        check=True, capture_output=True,
    )
    (wheel,) = dist.glob("fedpub-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    sources = {
        path.relative_to(ROOT) for top in ("fedpub", "strategies", "clients", "simulations")
        for path in (ROOT / top).rglob("*") if path.suffix in {".py", ".yaml"} and "__pycache__" not in path.parts
    }
    installed = {
        Path(*(("fedpub", *p.parts) if p.parts[0] != "fedpub" else p.parts)) for p in sources
    }
    assert {p for p in installed if not (unpacked / p).is_file()} == set()
    code = (
        "import fedpub, fedpub.simulations.tools.cli, fedpub.simulations.configs as configs\n"
        "from pathlib import Path\n"
        "print(Path(fedpub.__file__).parent, Path(configs.__file__).parent, "
        "(Path(configs.__file__).parent / 'quickstart.yaml').is_file(), fedpub.__path__ == [str(Path(fedpub.__file__).parent)])"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(unpacked)})
    assert done.returncode == 0, done.stderr
    package, configs, has_quickstart, own_path = done.stdout.split()
    assert Path(package) == unpacked / "fedpub" and Path(configs) == unpacked / "fedpub/simulations/configs"
    assert has_quickstart == own_path == "True"  # installed, fedpub's search path is its own folder alone
