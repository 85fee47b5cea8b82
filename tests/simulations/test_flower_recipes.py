"""Every recipe on Flower simulation (real Flower, real Ray) gives the in-process model and ledger.

Each recipe runs 3 rounds with noise on and the same seed on both backends; the public users train in the
ServerApp's server-held pool, except in the last case, where they are their own SuperNodes (sent TRAIN messages
with the public preconditioner). The ledgers (every round's DP event, composed) must be identical and the models
equal up to float32 rounding (both backends train with one torch thread, as Ray's actors do)."""

from __future__ import annotations

import json

import pytest
import torch

from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.flower.server_app import simulated_nodes
from fedpub.simulations.flower.simulation import run_flower_simulation
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them

PUBLIC = {"public": {"fraction": 0.25, "seed": 0}}  # 4 of the 16 writers are public: N = 12
FLOWER = {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 180}
ADAPTIVE = {"adaptive_clip": {"target_quantile": 0.5, "learning_rate": 0.2, "count_noise_std": 2.0}}

RECIPES = {  # each section at least once (adaptive clipping with three recipes), in 9 Flower simulations
    "dope+adaptive_clip": {"name": "dope", "public_clients_per_round": 2, **ADAPTIVE},
    "dope+warm_start+model_average": {"name": "dope", "public_clients_per_round": 2,
                                      "warm_start": {"epochs": 1, "lr": 0.1},
                                      "model_average": {"kind": "window", "window": 2}},
    "adadps_server+adaptive_clip": {"name": "adadps", "public_clients_per_round": 2,
                                    "precondition": {"placement": "server"}, **ADAPTIVE},
    "adadps_client+budget_schedule": {"name": "adadps", "public_clients_per_round": 2,
                                      "budget_schedule": {"boosted_rounds": 1, "boosted_noise_multiplier": 0.6}},
    "pda_dpmd+adaptive_clip": {"name": "pda_dpmd", "public_clients_per_round": 2, "mirror": {"decay_rounds": 2},
                               **ADAPTIVE},
    "pdp+recenter": {"name": "pdp", "public_clients_per_round": 2, "recenter": {},
                     "projection": {"k": 2, "noise_space": "subspace"}},
    "ppsgd": {"name": "ppsgd", "public_clients_per_round": 2,
              "public_schedule": {"budget_growth": 1.0, "noise_test_factor": 1e-9},  # z falls every round
              "model_reuse": {"epochs": 1, "prox_weight": 0.5}},
    "dp_ftrl+recenter": {"name": "dp_ftrl", "public_clients_per_round": 2, "recenter": {},
                         "sampling": {"kind": "epoch_blocks", "clients_per_round": 4}},  # N = 12: 3 rounds, one tree
}
EXTENDED = ("dope+warm_start+model_average", "adadps_server+adaptive_clip", "dope+adaptive_clip", "ppsgd",
            "pda_dpmd+adaptive_clip", "dp_ftrl+recenter")
"""Sections another test of the suite also runs on Flower (recenter: pdp; adaptive_clip: DOPE under SecAgg+, which
is Flower simulation; PPSGD's run phases: tests/simulations/test_drop_in_phases.py; noise correlated across rounds
after the sum: banded MF, tests/simulations/test_banded_mf_runs.py, DP-FTRL's tree in process). The mirror
(PDA-DPMD) runs on Flower with -m extended only (here and in the drop-in test); in the suite it runs on torchrun's
ranks (tests/simulations/test_distributed.py) and in process: the round is cut at the sum, so a transport does not
see which part runs after it."""
PRIVACY = {"ppsgd": {"budget_epsilon": 100.0},  # PPSGD spends until a budget is gone
           "dp_ftrl+recenter": {"accountant": "rdp"}}  # tree aggregation is accounted by RDP only


def _runs(tiny_emnist_dir, tmp_path, recipe, flower=FLOWER):
    make = lambda where: tiny_config(  # noqa: E731
        tiny_emnist_dir, tmp_path / where, rounds=3, data=PUBLIC, strategy=RECIPES[recipe], flower=flower,
        privacy={"delta": 1e-5, **PRIVACY.get(recipe, {})},
    )
    local_cfg, flower_cfg = make("inprocess"), make("flower")
    local = run_in_process(build_experiment(local_cfg), RunDirectory(local_cfg.output_dir / local_cfg.name))
    remote = run_flower_simulation(flower_cfg, simulated_nodes(build_experiment(flower_cfg)))
    return local, remote, local_cfg.output_dir / "tiny", flower_cfg.output_dir / "tiny"


def _records(root):
    return [json.loads(x) for x in (root / "metrics.jsonl").read_text().splitlines()]


def _assert_same_run(local, remote, local_dir, flower_dir):
    assert remote.rounds_done == local.rounds_done == 3
    for k in local.params:
        torch.testing.assert_close(remote.params[k], local.params[k], rtol=1e-5, atol=1e-6)
    ledger, flower_ledger = (json.loads((d / "ledger.json").read_text()) for d in (local_dir, flower_dir))
    assert flower_ledger == ledger
    records, flower_records = _records(local_dir), _records(flower_dir)
    for name in ("public_cohort_used", "noise/noise_multiplier", "epsilon"):
        assert [r.get(name) for r in flower_records] == [r.get(name) for r in records], name
    diagnostics, flower_diagnostics = (RunDirectory(d).read_diagnostics() for d in (local_dir, flower_dir))
    for name in ("cohort_sampled", "cohort_failed"):
        assert [r[name] for r in flower_diagnostics] == [r[name] for r in diagnostics], name
    assert remote.final_metrics == pytest.approx(local.final_metrics, rel=1e-4)  # incl. averaged and reused models
    return records


@pytest.mark.parametrize("recipe", [pytest.param(r, marks=pytest.mark.extended) if r in EXTENDED else r for r in RECIPES])
def test_every_recipe_on_flower_gives_the_in_process_model_and_ledger(tiny_emnist_dir, tmp_path, recipe, one_torch_thread):
    local, remote, local_dir, flower_dir = _runs(tiny_emnist_dir, tmp_path, recipe)
    records = _assert_same_run(local, remote, local_dir, flower_dir)
    if RECIPES[recipe].get("public_clients_per_round"):
        assert all(r["public_cohort_used"] == 2 for r in records)  # the public users really took part
    if recipe == "ppsgd":
        zs = [r["noise/noise_multiplier"] for r in records]
        assert zs[0] > zs[1] > zs[2]  # every round priced with its own z
    if "budget_schedule" in recipe:
        assert [r["noise/noise_multiplier"] for r in records] == [0.6, 0.8, 0.8]
    if recipe.startswith("dope") or recipe == "dp_ftrl+recenter":
        assert all(r["recenter/center_norm"] > 0 for r in records)
    if recipe == "dp_ftrl+recenter":
        assert [r["noise/tree_leaf"] for r in records] == [1, 2, 3]
    if "warm_start" in recipe:
        assert "warm_start/train_loss" in records[0] and "avg_eval_accuracy" in records[-1]
    if recipe == "ppsgd":
        assert "model_reuse/train_loss" in local.final_metrics
    if recipe.startswith("pdp"):
        assert all(r["project/projected"] == 1 and r["project/rank"] == 2 for r in records)
    if recipe.startswith("pda_dpmd"):
        assert records[-1]["mirror/alpha"] < 1


def test_public_users_as_their_own_nodes_give_the_in_process_model(tiny_emnist_dir, tmp_path, one_torch_thread):
    """AdaDPS on the clients with public users as nodes: the public nodes train with the generator the engine
    gives public users, and their replies set the preconditioner the private nodes are sent. (DOPE with public
    nodes runs on a real deployment in test_deployment.py and in the example app's test.)"""
    local, remote, local_dir, flower_dir = _runs(
        tiny_emnist_dir, tmp_path, "adadps_client+budget_schedule", flower={**FLOWER, "public_users": "nodes"}
    )
    records = _assert_same_run(local, remote, local_dir, flower_dir)
    assert all(r["public_cohort_used"] == 2 for r in records)
