"""``fedpub run --backend flower``: the same experiment through Flower's Simulation Engine (Ray).

One virtual SuperNode per private user; the ServerApp and ClientApp are bound to the experiment's
config (``run_simulation`` passes no run config). Results are written by the same RunSession as
the in-process engine, so the run directory looks the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from fedpub.config import ExperimentConfig, FlowerConfig
from fedpub.data.base import FederatedDataset
from fedpub.simulations.experiment import Experiment
from fedpub.simulations.flower_env import offline_flower_environment, quiet_flower_logging
from fedpub.simulations.session import RunResult


def backend_config(flower: FlowerConfig) -> dict[str, Any]:
    """The Ray backend settings of ``run_simulation`` from the config's ``flower`` section."""
    return {
        "client_resources": {"num_cpus": flower.client_num_cpus, "num_gpus": flower.client_num_gpus},
        "init_args": {"num_cpus": flower.ray_num_cpus or os.cpu_count() or 1},
    }


def simulated_nodes(experiment: Experiment) -> int:
    """How many virtual SuperNodes a simulation of ``experiment`` starts: :func:`federation_size` of its data."""
    return federation_size(experiment.config, experiment.train, experiment.public_data, experiment.public_ids)


def federation_size(
    config: ExperimentConfig, train: FederatedDataset, public: FederatedDataset, public_ids: Sequence[str]
) -> int:
    """One virtual SuperNode per user of the training file (its public users among them), plus one per held-out
    public user (``public`` is not ``train``) when public users are nodes (``flower.public_users: nodes``);
    ``partition-id`` counts through them in that order."""
    heldout = public is not train and config.flower.public_users == "nodes"
    return len(train.client_ids) + (len(public_ids) if heldout else 0)


def run_flower_simulation(
    config: ExperimentConfig,
    num_supernodes: int,
    *,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> RunResult:
    """Run ``config`` in Flower simulation with ``num_supernodes`` virtual nodes (one per user)."""
    if config.data.preload:
        raise ValueError(
            "data.preload fills the in-process engine's cache; in Flower simulation each user trains in a Ray "
            "worker that reads its own data: set data.preload: false, or run in process"
        )
    offline_flower_environment()
    quiet_flower_logging(in_process_simulation=True)
    from flwr.simulation import run_simulation

    from fedpub.clients.client_app import make_client_app
    from fedpub.simulations.server_app import make_server_app

    results: list[RunResult] = []
    run_simulation(
        server_app=make_server_app(config, fresh=fresh, on_round=on_round, results=results),
        client_app=make_client_app(config),
        num_supernodes=num_supernodes,
        backend_config=backend_config(config.flower),
    )
    if not results:
        raise RuntimeError("the Flower simulation ended without a result; see the log above")
    return results[0]
