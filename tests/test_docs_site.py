"""The documentation site (``mkdocs.yml``; fedpub issue 46) builds with ``mkdocs build --strict``: a broken link, a
missing anchor or an API reference that names what the code no longer has fails here. Its home page is the README,
its generated blocks are made from the code, and its API reference from the docstrings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from fedpub.simulations.tools import docs_reference
from fedpub.simulations.tools.docs_site import site_links

ROOT = docs_reference.ROOT


def _build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(project / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=project, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=300,
    )


def test_the_site_builds_strictly_with_the_readme_home_the_recipes_and_the_api(tmp_path):
    result = _build(ROOT, tmp_path / "site")
    assert result.returncode == 0, result.stderr[-4000:]
    site = tmp_path / "site"
    home = (site / "index.html").read_text()
    assert "user-level differential privacy" in home and 'href="guides/flower/"' in home
    assert "<code>simulations/configs/quickstart.yaml</code>" in home  # a repository file is named, not linked
    dope = (site / "recipes" / "dope" / "index.html").read_text()
    assert "center_clip" in dope and "flower_secagg" in dope  # its card, made from the registry and the config
    matrix = (site / "guides" / "flower" / "index.html").read_text()
    assert "flower_secagg" in matrix and "distributed" in matrix
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "FedpubStrategy" in api and "from_config" in api and "output_dir" in api


def test_a_broken_link_fails_the_strict_build(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "docs", project / "docs")
    for package in ("fedpub", "simulations", "strategies", "clients"):
        (project / package).symlink_to(ROOT / package)
    page = project / "docs" / "concepts.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    result = _build(project, tmp_path / "site")
    assert result.returncode != 0 and "no-such-page.md" in result.stderr


def test_links_are_made_for_the_site():
    readme = "[flower](docs/guides/flower.md#own-app) [cfg](simulations/configs/quickstart.yaml) [w](https://x.org)"
    assert site_links(readme, "index.md") == (
        "[flower](guides/flower.md#own-app) cfg (`simulations/configs/quickstart.yaml`) [w](https://x.org)")
    page = "[design](../design.md) [`examples/quickstart_dp/`](../../examples/quickstart_dp/) [a](#here)"
    assert site_links(page, "guides/flower.md") == "[design](../design.md) `examples/quickstart_dp/` [a](#here)"
