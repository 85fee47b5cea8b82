"""Banded MF DP-FTRL (Choquette-Choo et al. 2023) end to end on the tiny synthetic dataset: one band is DP-FedAvg
bit for bit, a resumed run is the uninterrupted one (the noise history restored from the checkpoint), the cyclic
cohorts and the ledger, DOPE's recentering beside it, and the same run on Flower's simulation."""

from __future__ import annotations

import json
import math

import dp_accounting
import pytest
import torch

from fedpub.privacy.events import cyclic_group
from fedpub.privacy.ledger import read_ledger_event
from fedpub.simulations.flower.server_app import simulated_nodes
from fedpub.simulations.flower.simulation import run_flower_simulation
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config
from tests.simulations import runs

Z = 0.8
BANDED = {"noise_multiplier": Z, "noise": {"kind": "banded_mf", "bands": 3},
          "sampling": {"kind": "cyclic_poisson", "clients_per_round": 2, "groups": 3}}


def test_one_band_is_dp_fedavg_bit_for_bit(tiny_emnist_dir, tmp_path):
    fedavg = runs.run(tiny_config(tiny_emnist_dir, tmp_path / "fedavg"))
    banded = runs.run(tiny_config(tiny_emnist_dir, tmp_path / "banded",
                              strategy={"noise": {"kind": "banded_mf", "bands": 1}}))
    for k in fedavg.params:
        assert torch.equal(fedavg.params[k], banded.params[k]), k
    ledgers = [(tmp_path / run / "tiny" / "ledger.json").read_text() for run in ("fedavg", "banded")]
    assert json.loads(ledgers[0])["event"] == json.loads(ledgers[1])["event"]
    assert banded.epsilon == fedavg.epsilon


def test_cyclic_cohorts_and_the_ledger_of_a_banded_run(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=5, strategy=BANDED)
    experiment = build_experiment(cfg)
    result = run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name))
    strategy = experiment.strategy
    q = 2 * 3 / 16
    for t in range(5):
        assert {cyclic_group(u, strategy.seed, 3) for u in strategy.sample_cohort(experiment.private_ids, t)} <= {t % 3}
    paid = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(pytest.approx(Z)))
    assert read_ledger_event(tmp_path / "tiny" / "ledger.json") == dp_accounting.SelfComposedDpEvent(paid, 2)
    epsilons = [r["epsilon"] for r in runs.records(tmp_path / "tiny")]
    assert epsilons[0] == epsilons[2] < epsilons[3] == epsilons[4] == result.epsilon  # rounds 0 and 3 pay
    oracle = dp_accounting.pld.PLDAccountant().compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(Z)), math.ceil(5 / 3)))
    assert result.epsilon == pytest.approx(oracle.get_epsilon(1e-5), rel=1e-3)


def test_resuming_mid_run_gives_the_uninterrupted_model(tiny_emnist_dir, tmp_path):
    # stopped in round 5: the checkpoint holds round 2's state, two noise vectors in the history
    runs.assert_resumes_to_the_uninterrupted_run(
        lambda folder: tiny_config(tiny_emnist_dir, folder, rounds=6, checkpoint_every=3, strategy=BANDED), tmp_path,
        stop_at=4)


def test_banded_noise_with_public_recentering(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=3, data={"public": {"fraction": 0.25, "seed": 0}},
                      strategy={**BANDED, "name": "dope", "public_clients_per_round": 2})
    result = runs.run(cfg)
    records = runs.records(tmp_path / "tiny")
    assert all(r["public_cohort_used"] == 2 and r["recenter/center_norm"] > 0 for r in records)
    assert [r["noise/bands"] for r in records] == [3, 3, 3]
    assert result.rounds_done == 3 and math.isfinite(result.final_metrics["eval_loss"])


@pytest.mark.slow  # Flower, Ray: pytest -m 'not slow' skips it
def test_banded_noise_on_flower_gives_the_in_process_model_and_ledger(tiny_emnist_dir, tmp_path, one_torch_thread):
    flower = {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 180}
    local_cfg, flower_cfg = (tiny_config(tiny_emnist_dir, tmp_path / where, rounds=3, strategy=BANDED, flower=flower)
                             for where in ("inprocess", "flower"))
    local = runs.run(local_cfg)
    remote = run_flower_simulation(flower_cfg, simulated_nodes(build_experiment(flower_cfg)))
    assert remote.rounds_done == local.rounds_done == 3
    for k in local.params:
        torch.testing.assert_close(remote.params[k], local.params[k], rtol=1e-5, atol=1e-6)
    ledgers = [json.loads((tmp_path / where / "tiny" / "ledger.json").read_text()) for where in ("inprocess", "flower")]
    assert ledgers[0] == ledgers[1]
