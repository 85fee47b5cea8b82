"""The Python API (``import fedpub``): build and run an experiment from a config object, a mapping or a YAML
path, with or without a run directory, and get the model, the records and ε back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import fedpub
from fedpub.privacy.ledger import read_ledger_event
from tests.conftest import tiny_config


def test_a_run_without_a_run_directory_returns_the_model_records_and_epsilon(tiny_emnist_dir, tmp_path):
    raw = tiny_config(tiny_emnist_dir, tmp_path / "unused").model_dump(mode="json")
    seen = []
    result = fedpub.run(raw, output_dir=None, on_round=seen.append)
    assert result.run_dir is None and not (tmp_path / "unused").exists()
    assert [r["round"] for r in result.metrics] == [r["round"] for r in seen] == [0, 1, 2]
    assert result.rounds_done == 3 and result.epsilon == pytest.approx(result.metrics[-1]["epsilon"])
    assert {"cohort_sampled", "train_loss"} <= result.diagnostics[0].keys()
    # the model holds the released parameters and evaluates
    for name, tensor in result.model.named_parameters():
        assert torch.equal(tensor.detach(), result.params[name])
    assert result.model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def test_a_run_into_a_directory_writes_what_fedpub_run_writes_and_resumes(tiny_emnist_dir, tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tiny_emnist_dir, tmp_path / "ignored").model_dump(mode="json")))
    result = fedpub.run(str(path), output_dir=tmp_path / "runs")
    assert result.run_dir == tmp_path / "runs" / "tiny"
    for name in ("config.yaml", "metrics.jsonl", "ledger.json", "summary.md", "checkpoint.pt"):
        assert (result.run_dir / name).is_file(), name
    experiment = fedpub.build(path)
    assert read_ledger_event(result.run_dir / "ledger.json") == experiment.planned_event
    again = fedpub.run(fedpub.load_config(path), output_dir=tmp_path / "runs")  # finished: resumed, not rerun
    assert again.metrics == result.metrics
    for k in result.params:
        assert torch.equal(again.params[k], result.params[k])


def test_a_bad_config_is_refused_naming_the_field():
    with pytest.raises(fedpub.ConfigError, match="strategy.clip_norm"):
        fedpub.run({"strategy": {"clip_norm": -1}}, output_dir=None)
    with pytest.raises(TypeError, match="ExperimentConfig, a mapping or a YAML path"):
        fedpub.build(42)


def test_a_users_own_strategies_clients_and_simulations_files_do_not_shadow_fedpubs(tmp_path):
    """A notebook's folder with its own strategies.py, clients/ and simulations.py: a script there (its folder
    first on sys.path) still gets fedpub's subpackages, installed as fedpub.strategies, fedpub.clients and
    fedpub.simulations."""
    for name in ("strategies.py", "simulations.py", "clients/__init__.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("raise ImportError('the user file was imported')\n")
    script = tmp_path / "analysis.py"
    script.write_text(
        "import fedpub\n"
        "from fedpub.strategies import adadps\n"
        "from fedpub.clients import client_app\n"
        "from fedpub.simulations.run import api\n"
        "print(adadps.__file__, client_app.__file__, api.__file__, fedpub.run is api.run, sep='\\n')\n"
    )
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    *files, same_run = done.stdout.split()
    repository = Path(fedpub.__file__).resolve().parents[1]
    assert [Path(f).relative_to(repository).as_posix() for f in files] == [
        "strategies/adadps.py", "clients/client_app.py", "simulations/run/api.py"]
    assert same_run == "True"
