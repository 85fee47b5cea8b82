"""Your own model, task and data (issue 37): a model and a task defined here (registered nowhere) trained with DOPE
through a config's import path and through ``fedpub.run(model=...)``, users handed over from Python, a Hugging Face
dataset in FEMNIST's schema and a Parquet table with a user column; bad columns and factories refused by field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fedpub
from fedpub.clients.cohort_training import vectorisation_blocker
from fedpub.config import ConfigError, dump_config, parse_config
from fedpub.data.base import DatasetError
from fedpub.models.seeded import new_model
from fedpub.tasks import get_task
from tests.conftest import tiny_config
from tests.simulations.test_flower_recipes import PRIVACY, RECIPES

HERE = __name__


class TinyNet(nn.Module):
    """A two-layer perceptron over 28x28 images: a model fedpub has never seen."""

    def __init__(self, hidden: int = 16, classes: int = 62) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def make_model(hidden: int = 16, classes: int = 62) -> nn.Module:
    return TinyNet(hidden, classes)


def make_batchnorm_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 8), nn.BatchNorm1d(8), nn.Linear(8, 62))


def example_loss(outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, y, reduction="none")


def hit(outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (outputs.argmax(-1) == y).float()


def mean_loss(outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, y)


DOPE = {"name": "dope", "clip_norm": 0.5, "noise_multiplier": 0.8, "public_clients_per_round": 2,
        "sampling": {"kind": "poisson", "clients_per_round": 4}}


def _users(n: int = 24, seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    sizes = [6 + i % 5 for i in range(n)]
    return {f"w{i:03d}": (torch.rand(k, 1, 28, 28, generator=g), torch.randint(0, 62, (k,), generator=g))
            for i, k in enumerate(sizes)}


def _own(out: Path, data: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    raw = tiny_config(Path("unused"), out).model_dump(mode="json")
    raw.update(model={"factory": f"{HERE}:make_model", "kwargs": {"hidden": 8}}, strategy=DOPE, data=data,
               task={"loss": f"{HERE}:example_loss", "metrics": [f"{HERE}:hit"]})
    raw.update(overrides)
    return raw


def _python_data() -> dict[str, Any]:
    return {"source": "python", "public": {"fraction": 0.25}, "eval_users": "auto"}


def test_a_model_and_task_named_by_import_path_train_with_dope(tmp_path):
    result = fedpub.run(_own(tmp_path, _python_data()), output_dir=None, data=_users())
    assert isinstance(result.model, TinyNet) and result.model.layers[1].out_features == 8
    assert result.rounds_done == 3 and result.epsilon > 0
    assert "eval_hit" in result.final_metrics and 0 <= result.final_metrics["eval_hit"] <= 1


def test_fedpub_run_takes_the_model_the_task_and_the_users_from_python(tmp_path):
    raw = tiny_config(Path("unused"), tmp_path).model_dump(mode="json")
    raw.update(strategy=DOPE, data=_python_data())
    result = fedpub.run(raw, output_dir=tmp_path, model=make_model, loss=example_loss, metrics=[hit], data=_users())
    stored = (result.run_dir / "config.yaml").read_text()
    assert f"factory: {HERE}:make_model" in stored and f"loss: {HERE}:example_loss" in stored
    assert isinstance(result.model, TinyNet) and result.model.layers[1].out_features == 16
    # the same run from the config's import paths gives the same model, bit for bit
    again = fedpub.run(_own(tmp_path, _python_data(), model={"factory": f"{HERE}:make_model"}), output_dir=None,
                       data=_users())
    for name, tensor in result.params.items():
        assert torch.equal(again.params[name], tensor), name


def test_a_callable_that_its_reference_does_not_give_back_is_refused(tmp_path):
    with pytest.raises(ValueError, match="top level"):
        fedpub.run(_own(tmp_path, _python_data()), output_dir=None, model=lambda: TinyNet(), data=_users())
    with pytest.raises(ValueError, match="both"):
        fedpub.run(_own(tmp_path, _python_data()), output_dir=None, loss=example_loss, data=_users())


def test_python_data_runs_in_process_only_and_only_with_its_source(tmp_path):
    with pytest.raises(ValueError, match="runs in process"):
        fedpub.run(_own(tmp_path, _python_data()), output_dir=None, backend="flower", data=_users())
    with pytest.raises(DatasetError, match="fedpub.run\\(config, data=...\\)"):
        fedpub.run(_own(tmp_path, _python_data()), output_dir=None)


def test_a_factory_that_does_not_import_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"model.factory.*does not import.*package.module|model.factory.*No module"):
        parse_config({"model": {"factory": "no_such_package.models:make"}})
    with pytest.raises(ConfigError, match="model.factory.*package.module:attribute"):
        parse_config({"model": {"factory": "not a reference"}})
    with pytest.raises(ConfigError, match="model.name.*or model.factory"):
        parse_config({"model": {"name": "emnist_mlp", "factory": f"{HERE}:make_model"}})
    with pytest.raises(ConfigError, match="task.metrics.0.*does not import"):
        parse_config({"task": {"loss": f"{HERE}:example_loss", "metrics": [f"{HERE}:nothing"]}})
    with pytest.raises(ConfigError, match="model.*does not go with data.source `huggingface`.*model.factory"):
        parse_config({"model": {"name": "emnist_mlp"}, "data": {"source": "huggingface"}})


def test_a_registered_models_config_reads_and_dumps_as_before(tiny_emnist_dir, tmp_path):
    text = dump_config(tiny_config(tiny_emnist_dir, tmp_path))
    assert "model:\n  name: emnist_small_cnn\nclient:" in text and "table:" not in text


def test_the_vectorised_path_takes_a_model_it_has_never_seen_and_refuses_one_with_the_reason():
    task = get_task(parse_config({"task": {"loss": f"{HERE}:example_loss", "metrics": [f"{HERE}:hit"]}}).task)
    assert vectorisation_blocker(TinyNet(), task) is None
    with_dropout = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(28 * 28, 62))
    assert "Dropout" in vectorisation_blocker(with_dropout, task)
    with pytest.raises(ValueError, match="task.loss must return one value per example"):
        get_task(parse_config({"task": {"loss": f"{HERE}:mean_loss", "metrics": [f"{HERE}:hit"]}}).task).loss(
            torch.zeros(3, 62), torch.zeros(3, dtype=torch.long))


def test_a_factory_model_with_running_statistics_is_refused(tmp_path):
    raw = _own(tmp_path, _python_data(), model={"factory": f"{HERE}:make_batchnorm_model"})
    with pytest.raises(ValueError, match="'2' \\(BatchNorm1d\\) keeps running statistics"):
        fedpub.run(raw, output_dir=None, data=_users())


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_recipe_trains_a_model_and_users_it_has_never_seen(tmp_path, recipe):
    raw = _own(tmp_path, _python_data(), strategy={**DOPE, **RECIPES[recipe]},
               privacy={"delta": 1e-5, **PRIVACY.get(recipe, {})})
    if recipe.startswith("dp_ftrl"):  # one tree over the 18 private users: 3 rounds of 6
        raw["strategy"]["sampling"] = {"kind": "epoch_blocks", "clients_per_round": 6}
    result = fedpub.run(raw, output_dir=None, data=_users())
    assert result.rounds_done == 3 and isinstance(result.model, TinyNet) and result.epsilon > 0


def test_the_noise_std_is_z_c_over_m_and_one_users_update_moves_the_model_at_most_c_over_m(tmp_path):
    """The privacy invariants on a model and users fedpub has never seen: each round's noise std is z·C/m, and
    without noise the released change is the clipped updates' sum over m, each clipped to C whatever it was."""
    raw = _own(tmp_path, _python_data(), rounds=2, strategy={**DOPE, "noise_multiplier": 1.3, "clip_norm": 0.2})
    result = fedpub.run(raw, output_dir=None, data=_users())
    assert [r["noise/noise_std"] for r in result.metrics] == pytest.approx([1.3 * 0.2 / 4] * 2)
    quiet = {"name": "dp_fedavg", "clip_norm": 0.2, "noise_multiplier": 0.0,
             "sampling": {"kind": "poisson", "clients_per_round": 4}}
    raw = _own(tmp_path, _python_data(), rounds=1, strategy=quiet, client={**raw["client"], "lr": 5.0})
    initial = dict(new_model(parse_config(raw), 0, torch.device("cpu")).named_parameters())  # the run's seeded init
    result = fedpub.run(raw, output_dir=None, data=_users())
    moved = torch.sqrt(sum(((result.params[k] - initial[k].detach()) ** 2).sum() for k in initial))
    [record] = result.diagnostics
    assert record["clip/clipped_fraction"] == 1.0 and record["clip/norm_max"] > 0.2
    assert 0 < moved <= 0.2 * record["aggregate/cohort_size"] / 4 + 1e-6
