"""StackOverflow tasks end to end through the engine, on look-alike files in TFF's layout."""

from __future__ import annotations

import json

import pytest
import torch

from fedpub.config import ConfigError, parse_config
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory

SYNTHETIC = {"num_clients": 24, "test_clients": 6, "min_examples": 2, "max_examples": 6, "seed": 0}


def _config(tmp_path, task, model, public: dict | None = None, **strategy):
    return parse_config(
        {
            "name": task, "rounds": 2, "eval_every": 1, "device": "cpu", "output_dir": str(tmp_path / "runs"),
            "task": task,
            "data": {"source": "synthetic_stackoverflow", "path": str(tmp_path / "so"),
                     "synthetic_stackoverflow": SYNTHETIC, "eval_clients": 6,
                     "stackoverflow": {"max_elements": 4}, **({"public": public} if public else {})},
            "model": {"name": model},
            "client": {"batch_size": 4, "lr": 0.5},
            "strategy": {"noise_multiplier": 0.5, "sampling": {"clients_per_round": 6}, **strategy},
        }
    )


@pytest.mark.parametrize(
    "task, model, headline",
    [
        ("so_tag", "so_tag_logreg", "recall_at_5"),
        ("so_tag_single", "so_tag_logreg", "accuracy"),
    ],
)
def test_tag_prediction_runs_and_reports_its_metrics(tmp_path, task, model, headline):
    cfg = _config(tmp_path, task, model)
    experiment = build_experiment(cfg)
    assert len(experiment.private_ids) == 24
    result = run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name))
    records = [json.loads(x) for x in (cfg.output_dir / task / "metrics.jsonl").read_text().splitlines()]
    assert 0.0 <= records[-1][f"eval_{headline}"] <= 1.0
    assert f"train_{headline}" in RunDirectory(cfg.output_dir / task).read_diagnostics()[-1]
    assert result.final_metrics[f"eval_{headline}"] == records[-1][f"eval_{headline}"]
    if task == "so_tag":
        assert "eval_precision" in records[-1]


def test_next_word_prediction_builds_the_tff_model_and_task(tmp_path):
    experiment = build_experiment(_config(tmp_path, "so_nwp", "so_nwp_lstm"))
    assert experiment.train.num_classes == 10_004
    assert experiment.task.headline == "accuracy_without_out_of_vocab_or_end_of_sentence"
    data = experiment.train.client_data(experiment.private_ids[0])
    assert data.x.shape[1] == 20 and int(data.x[0, 0]) == 10_002  # every sequence starts with BOS


def test_a_task_that_does_not_fit_the_data_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="task `so_tag` does not go with data.source `synthetic_emnist`"):
        parse_config({"task": "so_tag"})


def test_the_held_out_split_can_be_the_public_pool(tmp_path):
    raw = _config(tmp_path, "so_tag", "so_tag_logreg").model_dump(mode="json")
    raw["data"]["public"] = {"pool": "heldout"}
    experiment = build_experiment(parse_config(raw))
    assert len(experiment.private_ids) == 24 and len(experiment.public_ids) == 6
    assert not set(experiment.private_ids) & set(experiment.public_ids)
    assert experiment.strategy.population == 24  # public users are not in N
    assert len(experiment.public_data.client_data(experiment.public_ids[0])) > 0


@pytest.mark.parametrize("strategy", [{}, {"name": "dope", "public_clients_per_round": 2}])
def test_training_on_the_used_columns_gives_the_model_of_training_the_whole_weight(tmp_path, monkeypatch, strategy):
    """The engine cuts each user's input weight to the columns of its words and sums ColumnUpdates; with the
    cut switched off (every user trains the whole weight) the run ends at the same model."""
    public = {"fraction": 0.2} if strategy else None  # public updates stay whole tensors

    def final_params(where: str):  # the same run name: the same noise and cohorts
        raw = _config(tmp_path, "so_tag", "so_tag_logreg", public=public, **strategy).model_dump(mode="json")
        raw["output_dir"] = str(tmp_path / where)
        raw["client"]["path"] = "loop"  # user by user: the cut (auto may time a vectorised whole-weight group)
        cfg = parse_config(raw)
        experiment = build_experiment(cfg)
        lines: list[str] = []
        result = run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name), log=lines.append)
        return result.params, lines

    cut, cut_log = final_params("cut")
    monkeypatch.setattr("fedpub.clients.input_columns.MAX_COLUMN_FRACTION", -1.0)  # no user's columns qualify
    whole, _ = final_params("whole")
    assert any("per-client loop (client.path is loop)" in line for line in cut_log)
    for name in whole:
        torch.testing.assert_close(cut[name], whole[name], rtol=1e-4, atol=1e-6)
