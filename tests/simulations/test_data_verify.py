"""`fedpub data verify` reads as `fedpub run` reads (issue 44, item 5): with --config the config's data is opened by
the run's readers, the model's preflight included, so a config a run refuses fails verification with the run's
message, and one that verifies runs; a valid Hugging Face save_to_disk folder is described, not read as StackOverflow
tag counts (its state.json was taken for one and the folder reported FAILED)."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

import fedpub
from fedpub.simulations.tools.data_cli import data_app
from tests.data.test_user_table import femnist_dir  # noqa: F401 (a save_to_disk folder in FEMNIST's schema)
from tests.test_bad_input_matrix import PLANTED_ID, planted_table, table_config

runner = CliRunner()


def _written(root: Path, raw: dict) -> Path:
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_verify_config_reads_every_user_as_a_run_does_and_the_run_then_runs(tmp_path):
    planted_table(tmp_path / "table")
    raw = table_config(tmp_path)
    result = runner.invoke(data_app, ["verify", "--config", str(_written(tmp_path, raw))])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[-1].strip() == "ok" and "31337" not in result.output and PLANTED_ID not in result.output
    assert any(line.strip().startswith("training users read: 12 users, 60 examples") for line in lines), lines
    assert fedpub.run(raw, output_dir=tmp_path / "runs").rounds_done == 2  # what verifies, runs


def test_verify_config_fails_with_the_runs_message_where_a_run_refuses(tmp_path):
    planted_table(tmp_path / "table")
    raw = table_config(tmp_path, model={"kwargs": {"num_classes": 5}})  # fewer outputs than the labels reach
    result = runner.invoke(data_app, ["verify", "--config", str(_written(tmp_path, raw))])
    assert result.exit_code == 1
    assert "FAILED: model.factory 'fedpub.models.emnist:Mlp': the model has 5 outputs" in " ".join(result.output.split())
    assert "31337" not in result.output and not (tmp_path / "runs").exists()
    both = runner.invoke(data_app, ["verify", str(tmp_path / "table"), "--config", str(tmp_path / "config.yaml")])
    assert both.exit_code == 2 and "not both" in both.output


def test_a_hugging_face_folder_verifies_as_one_dataset(femnist_dir, tmp_path):  # noqa: F811
    result = runner.invoke(data_app, ["verify", str(femnist_dir)])
    assert result.exit_code == 0, result.output
    assert "a Hugging Face dataset folder (save_to_disk)" in result.output and "FAILED" not in result.output
    assert "tag_count" not in result.output
    assert "columns image: Image" in " ".join(result.output.split())
