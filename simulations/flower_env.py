"""The environment every Flower process fedpub starts runs in: offline, with no telemetry, no update check and
no runtime dependency installation. One set of switches for the Simulation Engine (this process and its Ray
workers, :func:`offline_flower_environment`) and for a local deployment's SuperLink, SuperNodes and ``flwr``
CLI (:func:`simulations.deploy.processes.deployment_env`).
"""

from __future__ import annotations

import os

FLOWER_OFFLINE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}
"""Flower's switches that keep it from reaching the network."""


def offline_flower_environment() -> None:
    """Turn off Flower's telemetry, update check and runtime dependency installation in this process and the
    ones it starts (unless already set), and Ray's log deduplication, so that each virtual node's lines show."""
    for key, value in {**FLOWER_OFFLINE_ENV, "RAY_DEDUP_LOGS": "0"}.items():
        os.environ.setdefault(key, value)
