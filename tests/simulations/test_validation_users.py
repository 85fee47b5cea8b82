"""Validation users (``data.validation``, fedpub issue 21): a seeded fraction of the private training users held out
of the private population N, never sampled nor trained on, evaluated like the test split as ``val_*`` metrics in
the run's records and in the comparison's CSV; the accountant's N and sampling rate count only the rest."""

from __future__ import annotations

import json

import pytest

from fedpub.config import ConfigError
from fedpub.privacy.accountant import epsilon_for
from fedpub.privacy.events import PoissonSampling
from fedpub.simulations.tools.compare_report import csv_text, read_run
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config


def test_validation_users_leave_n_are_never_trained_and_are_evaluated(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, data={"public": {"fraction": 0.125},
                                                       "validation": {"fraction": 0.25, "seed": 5}})
    experiment = build_experiment(cfg)
    private, public, validation = map(set, (experiment.private_ids, experiment.public_ids, experiment.validation_ids))
    assert (len(private), len(public), len(validation)) == (10, 2, 4)  # 16 writers: 2 public, 25 % of 14 held out
    assert not (private & validation or public & validation or private & public)
    assert experiment.strategy.population == 10  # N: neither the public nor the validation users
    result = run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name))
    records = [json.loads(line) for line in (tmp_path / "tiny" / "metrics.jsonl").read_text().splitlines()]
    assert all({"val_accuracy", "val_loss", "eval_accuracy"} <= r.keys() for r in records)
    q = 4 / 10  # the sampling rate over the 10 private users only
    assert result.epsilon == pytest.approx(epsilon_for(PoissonSampling(q), 0.8, 3, 1e-5), rel=1e-6)
    driver = experiment.round_driver(experiment.new_accountant())
    state = experiment.strategy.init(result.params)
    sampled = {c for t in range(20) for c in driver.plan(t, state).private_cohort}
    assert sampled and sampled <= private  # the cohorts are drawn from the private users only
    row = read_run(result.run_dir).row
    assert row["val_accuracy"] == pytest.approx(result.final_metrics["val_accuracy"])
    assert "val_accuracy" in csv_text([row], "accuracy").splitlines()[0]


def test_without_validation_users_the_run_has_no_val_metrics(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=1)
    result = run_in_process(build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name))
    assert not any(k.startswith("val_") for k in result.final_metrics)


def test_validation_users_with_private_users_as_nodes_are_refused(tiny_emnist_dir, tmp_path):
    with pytest.raises(ConfigError, match="data.validation.fraction"):
        tiny_config(tiny_emnist_dir, tmp_path, data={"validation": {"fraction": 0.1}},
                    flower={"private_users": "nodes", "expected_private_nodes": 4})
