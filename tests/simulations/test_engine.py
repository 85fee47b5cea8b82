"""The in-process round loop end to end on the tiny synthetic dataset (real HDF5, real accountant)."""

from __future__ import annotations

import json

import pytest
import torch

from fedpub.config import ConfigError
from fedpub.privacy.accountant import epsilon_for
from fedpub.privacy.errors import BudgetExceededError
from fedpub.privacy.events import PoissonSampling
from fedpub.privacy.ledger import read_ledger_event
from fedpub.simulations.run.engine import RunDirectoryError, run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config


def _run(cfg, **kwargs):
    experiment = build_experiment(cfg)
    return run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name), **kwargs)


def _assert_same_params(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_a_run_writes_every_result_and_accounts_each_round(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path)
    result = _run(cfg)
    root = tmp_path / "tiny"
    for name in ("config.yaml", "metrics.jsonl", "ledger.json", "checkpoint.pt", "accuracy.png", "summary.md"):
        assert (root / name).stat().st_size > 0, name
    records = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1, 2]
    assert all("eval_accuracy" in r for r in records)
    # ε after each round equals dp_accounting's ε for that many Poisson rounds with q = m / N
    q = 4 / 16
    for r in records:
        expected = epsilon_for(PoissonSampling(q), 0.8, r["round"] + 1, 1e-5)
        assert r["epsilon"] == pytest.approx(expected, rel=1e-6)
    assert result.epsilon == pytest.approx(records[-1]["epsilon"])
    assert read_ledger_event(root / "ledger.json") is not None
    assert "final test accuracy" in (root / "summary.md").read_text()


def test_the_same_seed_gives_the_same_model_twice_and_another_seed_does_not(tiny_emnist_dir, tmp_path):
    first = _run(tiny_config(tiny_emnist_dir, tmp_path / "a"))
    second = _run(tiny_config(tiny_emnist_dir, tmp_path / "b"))
    _assert_same_params(first.params, second.params)
    other = _run(tiny_config(tiny_emnist_dir, tmp_path / "c", seed=4))
    assert not torch.equal(first.params["0.weight"], other.params["0.weight"])


class _Interrupt(Exception):
    pass


def test_resuming_from_a_checkpoint_gives_the_uninterrupted_model(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path / "whole", rounds=4, checkpoint_every=2)
    whole = _run(cfg)

    cut_cfg = tiny_config(tiny_emnist_dir, tmp_path / "cut", rounds=4, checkpoint_every=2)

    def stop_in_round_three(record):
        if record["round"] == 2:  # after round 3's metrics are written, before its checkpoint
            raise _Interrupt

    with pytest.raises(_Interrupt):
        _run(cut_cfg, on_round=stop_in_round_three)
    resumed = _run(cut_cfg)
    _assert_same_params(whole.params, resumed.params)
    assert resumed.epsilon == pytest.approx(whole.epsilon)
    rounds = [json.loads(line)["round"] for line in (tmp_path / "cut/tiny/metrics.jsonl").read_text().splitlines()]
    assert rounds == [0, 1, 2, 3]  # no round counted twice, none lost


def test_a_directory_holding_another_config_is_refused(tiny_emnist_dir, tmp_path):
    _run(tiny_config(tiny_emnist_dir, tmp_path, rounds=1))
    with pytest.raises(RunDirectoryError, match="different config"):
        _run(tiny_config(tiny_emnist_dir, tmp_path, rounds=2))
    _run(tiny_config(tiny_emnist_dir, tmp_path, rounds=2), fresh=True)


def test_the_budget_stops_the_run_before_it_is_exceeded(tiny_emnist_dir, tmp_path):
    q, z, delta = 4 / 16, 0.8, 1e-5
    budget = (epsilon_for(PoissonSampling(q), z, 2, delta) + epsilon_for(PoissonSampling(q), z, 3, delta)) / 2
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=5, privacy={"delta": delta, "budget_epsilon": budget})
    result = _run(cfg)
    assert result.stopped_by_budget and result.rounds_done == 2
    assert result.epsilon <= budget


def test_a_budget_smaller_than_one_round_is_refused_before_anything_is_written(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, privacy={"delta": 1e-5, "budget_epsilon": 0.01})
    with pytest.raises(BudgetExceededError):
        build_experiment(cfg)
    assert not (tmp_path / "tiny").exists()


def test_public_users_are_never_sampled_and_do_not_count_in_the_population(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=2, data={"public": {"fraction": 0.25, "seed": 0}})
    experiment = build_experiment(cfg)
    assert len(experiment.public_ids) == 4 and len(experiment.private_ids) == 12
    assert not set(experiment.public_ids) & set(experiment.private_ids)
    for t in range(50):
        assert not set(experiment.strategy.sample_cohort(experiment.private_ids, t)) & set(experiment.public_ids)
    result = run_in_process(experiment, RunDirectory(tmp_path / "tiny"))
    # q = m / N with N = 12 private users, not the 16 in the file
    assert result.epsilon == pytest.approx(epsilon_for(PoissonSampling(4 / 12), 0.8, 2, 1e-5))


def test_the_same_data_as_sqlite_trains_the_same_model_as_hdf5(tiny_emnist_dir, tmp_path):
    from fedpub.data.emnist import load_emnist_split
    from fedpub.data.emnist_writers import read_emnist_clients, write_emnist_sqlite

    train, test = load_emnist_split(tiny_emnist_dir, only_digits=True)
    sqlite_path = write_emnist_sqlite(
        tmp_path / "emnist_all.sqlite",
        {"digits_only_train": read_emnist_clients(train), "digits_only_test": read_emnist_clients(test)},
    )
    h5 = _run(tiny_config(tiny_emnist_dir, tmp_path / "h5", rounds=2))
    sql = _run(tiny_config(tiny_emnist_dir, tmp_path / "sql", rounds=2, data={"source": "emnist_sqlite", "path": str(sqlite_path), "eval_clients": 4}))
    _assert_same_params(h5.params, sql.params)


def test_fixed_size_sampling_with_the_pld_accountant_is_refused_up_front(tiny_emnist_dir, tmp_path):
    from fedpub.privacy.errors import PrivacyError

    cfg = tiny_config(tiny_emnist_dir, tmp_path, strategy={"sampling": {"kind": "fixed", "clients_per_round": 4}})
    with pytest.raises(PrivacyError, match="privacy.accountant: .*accountant='rdp'"):
        build_experiment(cfg)
    assert not (tmp_path / "tiny").exists()
    rdp_cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=1, privacy={"accountant": "rdp"},
                          strategy={"sampling": {"kind": "fixed", "clients_per_round": 4}})
    assert _run(rdp_cfg).rounds_done == 1


def test_adaptive_clipping_runs_and_each_round_is_accounted_with_both_releases(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=3, strategy={
        "adaptive_clip": {"target_quantile": 0.5, "learning_rate": 0.2, "count_noise_std": 2.0}})
    result = _run(cfg)
    records = [json.loads(line) for line in (tmp_path / "tiny/metrics.jsonl").read_text().splitlines()]
    assert records[1]["clip/clip_norm"] == pytest.approx(records[0]["clip/next_clip_norm"])
    z_eff = (0.8**-2 + 2.0**-2) ** -0.5
    assert result.epsilon == pytest.approx(epsilon_for(PoissonSampling(4 / 16), z_eff, 3, 1e-5))


def test_dope_trains_public_users_each_round_and_accounts_like_dp_fedavg(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=2, data={"public": {"fraction": 0.25, "seed": 0}},
                      strategy={"name": "dope", "public_clients_per_round": 2, "recenter": {"center_clip": 1.0}})
    result = _run(cfg)
    records = [json.loads(line) for line in (tmp_path / "tiny/metrics.jsonl").read_text().splitlines()]
    assert all(r["public_cohort_used"] == 2.0 and 0 < r["recenter/center_norm"] <= 1.0 + 1e-6 for r in records)
    assert result.epsilon == pytest.approx(epsilon_for(PoissonSampling(4 / 12), 0.8, 2, 1e-5))


def test_dope_without_public_users_is_refused_when_the_config_is_read(tiny_emnist_dir, tmp_path):
    with pytest.raises(ConfigError, match="trains public users .*, but the data has none"):
        tiny_config(tiny_emnist_dir, tmp_path, strategy={"name": "dope"})
