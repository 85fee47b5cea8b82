"""The drop-in strategy runs a recipe's run phases as ``fedpub run`` does (real Flower, real Ray).

The same seeded config runs (a) in process (``fedpub run``'s engine and run session) and (b) through
:meth:`FedpubStrategy.from_config` in a Flower user's own ServerApp over fedpub's ClientApp, its public pool and
public trainer built from fedpub's own data: PDA-DPMD with its default warm start and the average of every round's
model (Algorithm 1's output), PPSGD with model reuse, DOPE with banded matrix-factorization noise on cyclic
Poisson cohorts (the noise's band state kept by the strategy across rounds). The released models (and the average) must be equal up to
float32 rounding (both train with one torch thread and sum the updates in the cohort's order: measured identical),
and the warm start must have moved
the model (so the released models would differ were a phase skipped on one side)."""

from __future__ import annotations

import pytest
import torch
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedpub.clients.client_app import make_client_app
from fedpub.clients.public_training import PooledPublicTrainer
from fedpub.clients.round_training import ServerPublicPool
from fedpub.models.seeded import model_params
from fedpub.run_phases import RunPhases
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.flower.environment import offline_flower_environment
from fedpub.simulations.flower.server_app import simulated_nodes
from fedpub.simulations.flower.simulation import backend_config
from fedpub.simulations.run.run_dir import RunDirectory
from fedpub.strategies.flower import FedpubStrategy, to_array_record, to_tensors
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them

PUBLIC = {"public": {"fraction": 0.25, "seed": 0}}  # 4 of the 16 writers are public: N = 12
FLOWER = {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 180}
RECIPES = {
    "pda_dpmd": {"name": "pda_dpmd", "public_clients_per_round": 2, "mirror": {"decay_rounds": 2},
                 "model_average": {"kind": "all"}},  # warm_start: on by default
    "ppsgd": {"name": "ppsgd", "public_clients_per_round": 2,
              "public_schedule": {"budget_growth": 1.0, "noise_test_factor": 1e-9},
              "model_reuse": {"epochs": 1, "prox_weight": 0.5}},
    "dope_banded_mf": {"name": "dope", "noise": {"kind": "banded_mf", "bands": 2, "factorization": "optimized"},
                       "sampling": {"kind": "cyclic_poisson", "clients_per_round": 4, "groups": 2}},
}
PRIVACY = {"ppsgd": {"budget_epsilon": 100.0}}
EXTENDED = ("dope_banded_mf",)
"""Run with -m extended (about a minute; torchrun and Flower simulation run banded MF in the suite)."""


def run_drop_in(config) -> tuple[FedpubStrategy, dict[str, torch.Tensor]]:
    """The config's recipe through ``FedpubStrategy.from_config`` in a Flower simulation, from the experiment's
    seeded first model: the strategy and the released model."""
    experiment = build_experiment(config)
    model = experiment.new_model()
    initial = model_params(model)
    seen: dict = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedpubStrategy.from_config(
            config.strategy, population=len(experiment.private_ids), rounds=config.rounds, privacy=config.privacy,
            seed=experiment.randomness.seed, private_ids=experiment.private_ids,
            public_pool=ServerPublicPool(experiment.cohort_trainer(model), experiment.public_data,
                                         experiment.public_ids, config.seed),
            public_trainer=PooledPublicTrainer(model, experiment.public_data, experiment.public_ids, experiment.task,
                                               config.seed),
            node_wait_timeout=config.flower.node_wait_timeout,
        )
        seen["strategy"] = strategy
        seen["result"] = strategy.start(grid, to_array_record(initial), num_rounds=config.rounds, timeout=300)

    offline_flower_environment()
    from flwr.simulation import run_simulation

    run_simulation(server_app=server_app, client_app=make_client_app(config),
                   num_supernodes=simulated_nodes(experiment), backend_config=backend_config(config.flower))
    assert "result" in seen, "the drop-in ServerApp did not finish; see the log above"
    return seen["strategy"], to_tensors(seen["result"].arrays)


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("recipe", [pytest.param(r, marks=pytest.mark.extended) if r in EXTENDED else r
                                    for r in RECIPES])  # -m extended: banded MF through the drop-in
def test_the_drop_in_strategy_runs_the_recipe_as_fedpub_run(tiny_emnist_dir, tmp_path, recipe, one_torch_thread):
    make = lambda where: tiny_config(  # noqa: E731
        tiny_emnist_dir, tmp_path / where, rounds=3, data=PUBLIC, strategy=RECIPES[recipe], flower=FLOWER,
        privacy={"delta": 1e-5, **PRIVACY.get(recipe, {})},
    )
    local_cfg, drop_in_cfg = make("inprocess"), make("drop_in")
    local = run_in_process(build_experiment(local_cfg), RunDirectory(local_cfg.output_dir / local_cfg.name))
    strategy, released = run_drop_in(drop_in_cfg)

    assert strategy.phases == RunPhases.from_config(local_cfg.strategy)
    print(f"{recipe}: max |Δ| of the released models {max_difference(released, local.params):.3g}")
    for k in local.params:
        torch.testing.assert_close(released[k], local.params[k], rtol=1e-5, atol=1e-6)
    assert strategy.epsilon() == pytest.approx(local.epsilon, rel=1e-9)
    if recipe == "pda_dpmd":
        assert "warm_start/train_loss" in strategy.phase_metrics
        checkpoint = RunDirectory(local_cfg.output_dir / local_cfg.name).load_checkpoint()
        local_average = RunPhases.averaged(checkpoint["model_average"])
        averaged = to_tensors(strategy.averaged_arrays())
        print(f"{recipe}: max |Δ| of the averaged models {max_difference(averaged, local_average):.3g}")
        for k in local_average:
            torch.testing.assert_close(averaged[k], local_average[k], rtol=1e-5, atol=1e-6)
    elif recipe == "ppsgd":
        assert "model_reuse/train_loss" in strategy.phase_metrics
        private = RunDirectory(local_cfg.output_dir / local_cfg.name).load_checkpoint()["params"]
        assert max_difference(released, private) > 1e-4  # the released model is the reused one, not w_T
