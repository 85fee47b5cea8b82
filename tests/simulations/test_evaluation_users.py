"""Evaluation out of the private population (fedpub issue 32, item 4): by default (``data.eval_users: auto``) the
model is evaluated on the public users' test examples when there are some, else on evaluation users held out of N
(``data.evaluation``: never sampled nor trained on); private users' test examples only when asked (``all``)."""

from __future__ import annotations

import pytest

from fedpub.config import ConfigError, load_config, parse_config
from fedpub.simulations.configs import quickstart_config_path
from fedpub.simulations.run.experiment import build_experiment
from tests.conftest import tiny_config

HELD_OUT = "test examples of users outside N (held out, never trained on)"


def test_the_quick_start_evaluates_on_users_outside_n(tmp_path):
    raw = load_config(quickstart_config_path()).model_dump(mode="json")
    assert raw["data"]["eval_users"] == "auto" and raw["data"]["public"]["fraction"] == 0  # no public users
    # the quick start's settings on 100 of its writers, 10 a round (its 1,000 take a minute to write)
    raw["data"] |= {"path": str(tmp_path / "data"), "synthetic": {**raw["data"]["synthetic"], "num_writers": 100}}
    raw["strategy"]["sampling"]["clients_per_round"] = 10
    raw["output_dir"] = str(tmp_path / "runs")
    experiment = build_experiment(parse_config(raw))
    evaluated, held_out = set(experiment.eval_users.ids), set(experiment.evaluation_ids)
    assert experiment.eval_users.kind == "evaluation" and experiment.eval_users.label == HELD_OUT
    assert evaluated and evaluated <= held_out and not held_out & set(experiment.private_ids)
    assert experiment.strategy.population == len(experiment.private_ids) == 100 - len(held_out)
    assert 0 < len(held_out) < 20  # about data.evaluation.fraction 0.1 of them
    driver = experiment.round_driver(experiment.new_accountant())
    state = experiment.strategy.init({})
    sampled = {c for t in range(20) for c in driver.plan(t, state).private_cohort}
    assert sampled and sampled <= set(experiment.private_ids)  # never sampled, so never trained on


def test_with_public_test_examples_auto_evaluates_on_them_and_holds_nobody_out(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, data={"eval_users": "auto", "public": {"fraction": 0.25}})
    experiment = build_experiment(cfg)
    assert experiment.eval_users.kind == "public" and experiment.evaluation_ids == []
    assert set(experiment.eval_users.ids) <= set(experiment.public_ids)
    assert experiment.strategy.population == 12  # 16 writers, 4 public


def test_private_users_test_examples_only_when_asked_and_labelled(tiny_emnist_dir, tmp_path):
    experiment = build_experiment(tiny_config(tiny_emnist_dir, tmp_path, data={"eval_users": "all"}))
    assert experiment.eval_users.private and experiment.evaluation_ids == []
    assert experiment.eval_users.label == "private users' test examples (not covered by DP)"
    assert experiment.strategy.population == 16


def test_held_out_evaluation_users_are_refused_when_the_fraction_holds_out_none(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, data={"eval_users": "evaluation", "evaluation": {"fraction": 0.001}})
    with pytest.raises(ValueError, match=r"data.evaluation.fraction 0.001 of 16 private users holds out none"):
        build_experiment(cfg)


@pytest.mark.parametrize("raw", [{"data": {"evaluation": {"fraction": 0}}}, {"data": {"evaluation": {"fraction": 1}}}])
def test_an_evaluation_fraction_outside_0_1_is_refused(raw):
    with pytest.raises(ConfigError, match="data.evaluation.fraction"):
        parse_config(raw)


def test_evaluation_users_with_private_users_as_nodes_are_refused(tiny_emnist_dir, tmp_path):
    with pytest.raises(ConfigError, match="data.eval_users `evaluation`"):
        tiny_config(tiny_emnist_dir, tmp_path, data={"source": "emnist_h5", "eval_users": "evaluation"},
                    flower={"private_users": "nodes", "expected_private_nodes": 4})


def _users_without_test_split(users: int = 20) -> dict:
    """Users handed over from Python (no test split: a user's rows are its training rows), a quarter public."""
    import torch

    g = torch.Generator().manual_seed(0)
    return {f"u{i:02d}": (torch.rand(4, 1, 28, 28, generator=g), torch.randint(0, 10, (4,), generator=g))
            for i in range(users)}


def _without_test_split(tmp_path, eval_users: str):
    raw = tiny_config(tmp_path / "unused", tmp_path).model_dump(mode="json")
    raw["data"] = {"source": "python", "public": {"fraction": 0.25}, "eval_users": eval_users,
                   "evaluation": {"fraction": 0.3}}
    raw["model"] = {"factory": "fedpub.models.emnist:Mlp", "kwargs": {"num_classes": 10}}
    return parse_config(raw)


def test_without_a_test_split_the_public_users_training_rows_are_never_called_test(tmp_path):
    """A source with no test split (a table, a Hugging Face folder, users from Python): the public users' rows are
    rows they train on, so ``auto`` evaluates on held-out users instead, and ``public`` and ``all`` are refused
    naming data.eval_users (issue 44, item 3)."""
    from fedpub.data.base import Splits
    from fedpub.data.python_users import PythonUsers

    users = PythonUsers(_users_without_test_split())
    experiment = build_experiment(_without_test_split(tmp_path, "auto"), splits=Splits(users, users))
    evaluated = set(experiment.eval_users.ids)
    assert experiment.eval_users.kind == "evaluation" and experiment.eval_users.label == HELD_OUT
    assert evaluated and evaluated <= set(experiment.evaluation_ids)
    assert not evaluated & (set(experiment.public_ids) | set(experiment.private_ids))
    for setting in ("public", "all"):
        with pytest.raises(ValueError, match=f"data.eval_users `{setting}`: the data has no test split"):
            build_experiment(_without_test_split(tmp_path, setting), splits=Splits(users, users))
