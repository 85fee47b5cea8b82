"""The preflight (issue 44, item 5): a model that does not fit the data or the task, factory arguments its signature
refuses, users given from Python that fedpub cannot train on are refused before any noise is drawn, by `fedpub run`
(dry or not: exit 2, one `error:` line, no run directory, no ledger) and by `fedpub.run`, naming the field and the
sizes, never an example's values; a factory module beside the config (the current folder) imports without
PYTHONPATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch import nn
from typer.testing import CliRunner

import fedpub
from fedpub.config import ConfigError, dump_config
from fedpub.data.base import DatasetError
from fedpub.simulations.tools.cli import app
from tests.conftest import tiny_config

HERE = __name__
MARKER = 12345.678
"""A distinctive input value planted in one user's examples: no error may print it."""

runner = CliRunner()


def make_model(classes: int = 10, hidden: int = 8) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def make_flat_model(classes: int = 10) -> nn.Module:
    """A model for inputs of 100 features: images of 28x28 do not fit it."""
    return nn.Sequential(nn.Flatten(), nn.Linear(100, classes))


def make_nothing() -> str:
    return "not a model"


def _config_file(tmp_path: Path, data_dir: Path, model: dict[str, Any]) -> Path:
    raw = yaml.safe_load(dump_config(tiny_config(data_dir, tmp_path / "runs")))
    raw["model"] = model
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _one_error_line(output: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in output, output
    return errors[0]


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_model_with_fewer_outputs_than_classes_is_refused_before_round_0(tiny_emnist_dir, tmp_path, dry_run):
    config = _config_file(tmp_path, tiny_emnist_dir, {"factory": f"{HERE}:make_model", "kwargs": {"classes": 5}})
    result = runner.invoke(app, ["run", str(config), *(["--dry-run"] if dry_run else [])])
    assert result.exit_code == 2, result.output
    error = _one_error_line(result.output)
    assert "model.factory" in error and "5 outputs" in error and "declares 10 classes" in error, error
    assert "model.kwargs" in error and "would run" not in result.output
    assert not (tmp_path / "runs").exists()  # no run directory, no ledger: nothing spent


def test_factory_arguments_are_checked_against_its_signature(tiny_emnist_dir, tmp_path):
    config = _config_file(tmp_path, tiny_emnist_dir, {"factory": f"{HERE}:make_model", "kwargs": {"hiden": 32}})
    error = _one_error_line(runner.invoke(app, ["run", str(config), "--dry-run"]).output)
    assert "model.kwargs" in error and "hiden is not among its arguments" in error and "classes, hidden" in error
    config = _config_file(tmp_path, tiny_emnist_dir, {"factory": f"{HERE}:make_nothing"})
    error = _one_error_line(runner.invoke(app, ["run", str(config), "--dry-run"]).output)
    assert "model.factory" in error and "returned a str, not a torch.nn.Module" in error
    assert not (tmp_path / "runs").exists()


def test_a_model_whose_input_does_not_fit_the_data_is_named_with_the_shapes(tiny_emnist_dir, tmp_path):
    config = _config_file(tmp_path, tiny_emnist_dir, {"factory": f"{HERE}:make_flat_model"})
    error = _one_error_line(runner.invoke(app, ["run", str(config), "--dry-run"]).output)
    assert "model.factory" in error and "x (5, 1, 28, 28) torch.float32" in error and "784" in error, error


def _config_beside_its_module(folder: Path, data_dir: Path, module: str) -> Path:
    """A config in ``folder`` whose ``model.factory`` is ``module:make``, a module written beside it."""
    (folder / f"{module}.py").write_text(
        "from torch import nn\n\n\ndef make(classes=10):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, classes))\n")
    config = _config_file(folder, data_dir, {"name": "emnist_mlp"})
    raw = yaml.safe_load(config.read_text())
    raw["model"] = {"factory": f"{module}:make"}
    config.write_text(yaml.safe_dump(raw))
    return config


def test_a_factory_module_beside_the_config_imports_without_pythonpath(tiny_emnist_dir, tmp_path, monkeypatch):
    _config_beside_its_module(tmp_path, tiny_emnist_dir, "preflight_beside_models")
    monkeypatch.chdir(tmp_path)  # `fedpub run exp.yaml` in the config's folder: a console script puts no '' on the path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path), os.getcwd())])
    monkeypatch.delitem(sys.modules, "preflight_beside_models", raising=False)
    result = runner.invoke(app, ["run", "exp.yaml", "--dry-run"])
    assert result.exit_code == 0 and "would run 3 rounds" in result.output, result.output
    assert sys.path[-1] == str(tmp_path) and str(tmp_path) not in sys.path[:-1]  # appended: installed packages first
    sys.modules.pop("preflight_beside_models", None)


def test_a_factory_module_beside_a_config_in_another_folder_imports_too(tiny_emnist_dir, tmp_path, monkeypatch):
    """``fedpub run sub/exp.yaml`` from the parent folder: the config's folder is searched after the current one,
    as ``python sub/script.py`` finds the modules beside the script."""
    from fedpub.data import spec

    sub = tmp_path / "sub"
    sub.mkdir()
    _config_beside_its_module(sub, tiny_emnist_dir, "preflight_elsewhere_models")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(sub), os.getcwd())])
    monkeypatch.setattr(spec, "CONFIG_FOLDERS", [])
    monkeypatch.delitem(sys.modules, "preflight_elsewhere_models", raising=False)
    result = runner.invoke(app, ["run", "sub/exp.yaml", "--dry-run"])
    assert result.exit_code == 0 and "would run 3 rounds" in result.output, result.output
    assert sys.path[-1] == str(sub)
    sys.modules.pop("preflight_elsewhere_models", None)


def _users(n: int = 8) -> dict[Any, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return {f"u{i}": (torch.rand(6, 1, 28, 28, generator=g), torch.randint(0, 5, (6,), generator=g)) for i in range(n)}


def _python_config(out: Path, **model: Any) -> dict[str, Any]:
    raw = tiny_config(Path("unused"), out).model_dump(mode="json")
    raw.update(model={"factory": f"{HERE}:make_model", "kwargs": model},
               data={"source": "python", "evaluation": {"fraction": 0.5}})  # no test split: held-out users
    return raw


def test_users_from_python_that_cannot_train_are_refused_by_count_and_dtype(tmp_path):
    users = _users()
    colliding = {**users, 1: users["u0"], "1": users["u1"]}
    with pytest.raises(DatasetError, match=r"data: 2 user ids are the same string.*of types int, str"):
        fedpub.run(_python_config(tmp_path), output_dir=tmp_path, data=colliding)
    floats = {**users, "u1": (users["u1"][0], users["u1"][1].float())}
    with pytest.raises(DatasetError, match=r"data: 1 of 8 users: y \(the labels\) of dtype torch.float32"):
        fedpub.run(_python_config(tmp_path), output_dir=tmp_path, data=floats)
    strings = {**users, "u2": (users["u2"][0].numpy(), ["a"] * 6)}
    with pytest.raises(DatasetError, match=r"data: 1 of 8 users: y \(the labels\) of dtype <U1"):
        fedpub.run(_python_config(tmp_path), output_dir=tmp_path, data=strings)
    empty = {**users, "u3": (torch.zeros(0, 1, 28, 28), torch.zeros(0, dtype=torch.long)),
             "u4": (torch.zeros(0, 1, 28, 28), torch.zeros(0, dtype=torch.long))}
    with pytest.raises(DatasetError, match="data: 2 of 8 users: no examples .*counted in N"):
        fedpub.run(_python_config(tmp_path), output_dir=tmp_path, data=empty)
    assert not (tmp_path / "tiny").exists()


def test_labels_beyond_the_models_outputs_are_refused_without_printing_an_example(tmp_path):
    users = _users()
    x, y = users["u0"]
    users["u0"] = (torch.full_like(x, MARKER), torch.full_like(y, 8))  # a planted value, and labels reaching 8
    with pytest.raises(ConfigError) as refused:
        fedpub.run(_python_config(tmp_path, classes=5), output_dir=tmp_path, data=users)
    message = str(refused.value)
    assert "model.factory" in message and "has 5 outputs" in message and "reach at least 8" in message, message
    assert "12345" not in message and not (tmp_path / "tiny").exists()
    users["u0"] = (torch.full_like(x, MARKER), torch.full_like(y, torch.iinfo(torch.int64).min))
    with pytest.raises(ConfigError, match="data: the labels .* negative values .*missing values") as refused:
        fedpub.run(_python_config(tmp_path, classes=5), output_dir=tmp_path, data=users)
    assert "12345" not in str(refused.value) and not (tmp_path / "tiny").exists()
    users["u0"] = (torch.full_like(x, MARKER)[:, :, :20], y)  # inputs another shape than the model's
    with pytest.raises(ConfigError, match=r"x \(6, 1, 20, 28\) torch.float32") as refused:
        fedpub.run(_python_config(tmp_path), output_dir=tmp_path, data=users)
    assert "12345" not in str(refused.value)
