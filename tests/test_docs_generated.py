"""The documentation's generated blocks are current (simulations/tools/docs_reference.py; fedpub issue 46): a
page that copies what the code knows goes stale the day the code changes, so the copy is generated and this test
fails, naming the page and the command, when the code has moved on."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpub.recipe_registry import PARTS
from fedpub.simulations.tools import docs_reference


def test_every_generated_block_of_the_docs_is_current():
    stale = docs_reference.stale()
    assert not stale, (f"stale generated blocks in {stale}: run python -m fedpub.simulations.tools.docs_reference "
                       "--write")


def test_the_transport_matrix_is_made_from_the_registry_and_a_stale_page_is_found(tmp_path, monkeypatch):
    matrix = docs_reference.transport_matrix()
    assert all(f"| `strategy.{part.section}` |" in matrix for part in PARTS)
    assert "`strategy.tree_aggregation` | `dp_ftrl` |" in matrix and "`epoch_blocks` (needs each user" in matrix
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text("before\n<!-- generated: transport-matrix -->\nold copy\n<!-- end generated -->\nafter\n")
    (tmp_path / "README.md").write_text("no block\n")
    assert docs_reference.stale(tmp_path) == ["docs/page.md"]
    page.write_text(docs_reference.regenerated(page.read_text(), page))
    assert docs_reference.stale(tmp_path) == [] and page.read_text().startswith("before\n") and "old copy" not in (
        page.read_text())
    page.write_text("<!-- generated: nope -->\n<!-- end generated -->\n")
    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        docs_reference.stale(tmp_path)


def test_the_readme_is_a_front_door():
    readme = (Path(docs_reference.ROOT) / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for link in ("docs/guides/configuration.md", "docs/own-model-and-data.md", "docs/guides/compare.md",
                 "docs/guides/flower.md", "docs/deployment.md", "docs/guides/reproductions.md"):
        assert f"]({link})" in readme and (Path(docs_reference.ROOT) / link).is_file()


def test_the_config_reference_holds_every_field_of_every_section():
    """Walks the models as a reader would: each section's heading, and a row for each of its fields."""
    from fedpub.config import ExperimentConfig, PrivacyConfig, SamplingConfig

    reference = docs_reference.config_reference()
    for model, where in ((ExperimentConfig, "(top level)"), (PrivacyConfig, "privacy"),
                         (SamplingConfig, "strategy.sampling")):
        section = reference.split(f"### `{where}`: {model.__name__}", 1)[1].split("\n### ", 1)[0]
        assert all(f"| `{name}` |" in section for name in model.model_fields), where
    assert "`Literal['poisson', 'cyclic_poisson', 'fixed', 'cyclic_fixed', 'epoch_blocks']` | `'poisson'`" in reference
    assert "| `rounds` | `int` | `40` | ≥ 1, ≤ 100000 |" in reference
