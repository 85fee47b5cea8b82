"""``fedpub run --backend flower``: the same experiment through Flower's Simulation Engine (Ray).

One virtual SuperNode per private user; the ServerApp and ClientApp are bound to the experiment's
config (``run_simulation`` passes no run config). Results are written by the same RunSession as
the in-process engine, so the run directory looks the same.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from logging import INFO
from typing import Any

from fedpub.config import ExperimentConfig, FlowerConfig
from fedpub.simulations.flower.environment import offline_flower_environment, quiet_flower_logging
from fedpub.simulations.flower.app_errors import run_result
from fedpub.simulations.flower.server_app import make_server_app
from fedpub.simulations.run.session import RunResult


RAY_CONNECT_TIMEOUT = 10.0
"""Seconds to wait for a Ray head's port before refusing the address (``ray.init`` itself would wait for minutes)."""


def backend_config(flower: FlowerConfig) -> dict[str, Any]:
    """The Ray backend settings of ``run_simulation`` from the config's ``flower`` section: Ray chosen by
    :func:`ray_init_args`, a cluster's head checked to answer, and which Ray logged."""
    init_args = ray_init_args(flower, os.environ)
    if init_args["address"] == "local":
        _log(f"a new local Ray with {init_args['num_cpus']} CPUs")
    else:
        field = "flower.ray_address" if flower.ray_address else "RAY_ADDRESS"
        check_ray_head(init_args["address"], field)
        _log(f"the Ray cluster at {init_args['address']} ({field})")
    return {
        "client_resources": {"num_cpus": flower.client_num_cpus, "num_gpus": flower.client_num_gpus},
        "init_args": init_args,
    }


def ray_init_args(flower: FlowerConfig, environ: Mapping[str, str]) -> dict[str, Any]:
    """The arguments of ``ray.init``: attach to ``flower.ray_address``, else to ``RAY_ADDRESS`` in ``environ``,
    passing no resources (a cluster's nodes declare theirs); with neither, ``address="local"``, a new local Ray of
    ``flower.ray_num_cpus`` CPUs (all by default) that never attaches to a Ray already running on the machine."""
    address = flower.ray_address or environ.get("RAY_ADDRESS") or None
    if address is None:
        return {"address": "local", "num_cpus": flower.ray_num_cpus or os.cpu_count() or 1}
    if flower.ray_num_cpus is not None:  # with flower.ray_address the config refuses it
        raise ValueError(
            f"flower.ray_num_cpus sizes the local Ray fedpub starts, but RAY_ADDRESS={address} attaches to a "
            "cluster whose nodes declare their CPUs (`ray start --num-cpus`): drop flower.ray_num_cpus or unset "
            "RAY_ADDRESS"
        )
    return {"address": address}


def check_ray_head(address: str, field: str) -> None:
    """A ValueError naming ``field`` unless ``address`` is a ``host:port`` where a Ray head's GCS answers: the port
    accepts a connection and a GCS request for the cluster id (:func:`gcs_refusal`) is answered within
    :data:`RAY_CONNECT_TIMEOUT` (something else listening there made ``ray.init`` hang for minutes)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(
            f"{field} must be the host:port of a Ray cluster's head (the address `ray start --head` prints), "
            f"got {address!r}"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT).close()
    except OSError as error:
        raise ValueError(
            f"{field}: no Ray cluster answers at {address} ({error}); start its head with `ray start --head "
            f"--port {port}`, or correct {field}"
        ) from None
    why = gcs_refusal(address, RAY_CONNECT_TIMEOUT)
    if why is not None:
        raise ValueError(
            f"{field}: something listens at {address}, but no Ray head answered a GCS request there within "
            f"{RAY_CONNECT_TIMEOUT:g} s ({why}): give the address `ray start --head` prints (its GCS port, 6379 by "
            f"default), or correct {field}"
        )


def gcs_refusal(address: str, timeout: float) -> str | None:
    """None when a Ray GCS at ``address`` answers its cluster id over gRPC within ``timeout`` seconds, else the
    gRPC status it failed with."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    channel = grpc.insecure_channel(address)
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout)
    except grpc.RpcError as error:
        return error.code().name
    finally:
        channel.close()
    return None


def _log(what: str) -> None:
    from flwr.common.logger import log

    log(INFO, "fedpub: Flower simulation on %s", what)


def refuse_preload(config: ExperimentConfig, where: str) -> None:
    """Refuse ``data.preload`` on a backend whose users train ``where`` (a process that reads its own data)."""
    if config.data.preload:
        raise ValueError(f"data.preload fills the in-process engine's cache; {where} that reads its own data: set "
                         "data.preload: false, or run in process")


def run_flower_simulation(
    config: ExperimentConfig,
    num_supernodes: int,
    *,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> RunResult:
    """Run ``config`` in Flower simulation with ``num_supernodes`` virtual nodes (one per user). An error a user
    fixes that stopped the ServerApp (the nodes, the ClientApp's replies, the config) is raised here, its traceback
    left out of Flower's log (:mod:`~fedpub.simulations.flower.app_errors`)."""
    refuse_preload(config, "in Flower simulation each user trains in a Ray worker")
    offline_flower_environment()
    quiet_flower_logging(in_process_simulation=True)
    backend = backend_config(config.flower)  # an unreachable cluster refused before the apps are built
    from flwr.simulation import run_simulation

    from fedpub.clients.client_app import make_client_app

    results: list[RunResult | Exception] = []
    run_simulation(
        server_app=make_server_app(config, fresh=fresh, on_round=on_round, results=results),
        client_app=make_client_app(config),
        num_supernodes=num_supernodes,
        backend_config=backend,
    )
    return run_result(results, "Flower simulation")
