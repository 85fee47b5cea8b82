"""pyproject.toml installs every package folder of the repository under its fedpub name, with the YAML files the
commands read (a folder missing from the explicit list would be absent from a wheel, not from this checkout)."""

from __future__ import annotations

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
