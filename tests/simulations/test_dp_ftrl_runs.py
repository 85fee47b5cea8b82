"""DP-FTRL end to end in-process on the tiny synthetic dataset (real HDF5, real RDP accountant): blocks of
users each epoch, one tree per epoch paid when it starts, a resumed run equal to an uninterrupted one, and
DOPE's recentering composed with it. (Flower simulation: tests/simulations/test_flower_recipes.py.)"""

from __future__ import annotations

import dp_accounting
import pytest

from fedpub.privacy.ledger import read_ledger_event
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config
from tests.simulations import runs

Z = 0.8
DP_FTRL = {"name": "dp_ftrl", "noise_multiplier": Z, "sampling": {"kind": "epoch_blocks", "clients_per_round": 4}}
RDP = {"delta": 1e-5, "accountant": "rdp"}


def _config(data_dir, out_dir, **overrides):
    return tiny_config(data_dir, out_dir, strategy=DP_FTRL, privacy=RDP, **overrides)


def test_a_run_trains_each_user_once_an_epoch_and_pays_each_tree_when_it_starts(tiny_emnist_dir, tmp_path):
    """16 users in blocks of 4: 4 rounds an epoch; 6 rounds = a tree of 4, then one of 2."""
    cfg = _config(tiny_emnist_dir, tmp_path, rounds=6)
    experiment = build_experiment(cfg)
    result = run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name))
    cohorts = [experiment.strategy.sample_cohort(experiment.private_ids, t) for t in range(6)]
    assert sorted(u for c in cohorts[:4] for u in c) == sorted(experiment.private_ids)
    assert {len(c) for c in cohorts} == {4}
    tree = dp_accounting.SingleEpochTreeAggregationDpEvent
    expected = dp_accounting.ComposedDpEvent([tree(Z, 4), tree(Z, 2)])
    assert read_ledger_event(tmp_path / "tiny" / "ledger.json") == expected == experiment.planned_event
    records = runs.records(tmp_path / "tiny")
    epsilons = [r["epsilon"] for r in records]
    assert epsilons[0] == epsilons[3] < epsilons[4] == epsilons[5] == result.epsilon  # a tree is paid up front
    assert [r["noise/tree_leaf"] for r in records] == [1, 2, 3, 4, 1, 2]
    assert all(r["cohort_sampled"] == 4 for r in RunDirectory(tmp_path / "tiny").read_diagnostics())


def test_resuming_inside_a_tree_gives_the_uninterrupted_model(tiny_emnist_dir, tmp_path):
    # stopped in round 5: the checkpoint holds round 2's tree state (3 rounds into the first tree)
    runs.assert_resumes_to_the_uninterrupted_run(
        lambda folder: _config(tiny_emnist_dir, folder, rounds=6, checkpoint_every=3), tmp_path, stop_at=4)


def test_dp_ftrl_with_public_recentering_runs_and_accounts_like_dp_ftrl(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=4, data={"public": {"fraction": 0.25, "seed": 0}},
                      strategy={**DP_FTRL, "recenter": {"center_clip": 1.0}, "public_clients_per_round": 2},
                      privacy=RDP)
    result = runs.run(cfg)
    records = runs.records(tmp_path / "tiny")
    assert all(r["public_cohort_used"] == 2 and 0 < r["recenter/center_norm"] <= 1 + 1e-6 for r in records)
    tree = dp_accounting.SingleEpochTreeAggregationDpEvent  # N = 12 private users: 3 blocks of 4 an epoch
    assert read_ledger_event(tmp_path / "tiny" / "ledger.json") == dp_accounting.ComposedDpEvent(
        [tree(Z, 3), tree(Z, 1)])
    assert result.rounds_done == 4 and "eval_accuracy" in result.final_metrics


def test_dp_ftrl_with_the_pld_accountant_is_refused_before_anything_is_written(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, strategy=DP_FTRL)
    with pytest.raises(ValueError, match="privacy.accountant: .*accountant='rdp'"):
        build_experiment(cfg)
    assert not (tmp_path / "tiny").exists()
