"""The experiment a ``flwr run`` names: the run config key ``config``, a YAML path, absolute or relative to the
Flower App's directory. The ServerApp and the ClientApp both read it from here, so that neither imports the
other's module: Flower's simulation runtime loads the two apps in one process from two threads, and a ServerApp
that imported ``fedpub.clients.client_app`` while the Simulation Engine loaded it handed Flower the half-initialised
module (``LoadClientAppError: partially initialized module 'fedpub.clients.client_app' has no attribute 'app'``).
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context

from fedpub.config import ConfigError, ExperimentConfig, load_config

APP_DIR = Path(__file__).resolve().parents[1]
"""The Flower App's directory (this repository, or the app bundle ``flwr run`` installed): ``clients/`` sits at
its top, beside ``pyproject.toml`` and the bundled configs."""


def experiment_config(context: Context) -> ExperimentConfig:
    """The config named by the run config key ``config``: a YAML path, absolute or relative to :data:`APP_DIR`
    (the default in ``pyproject.toml`` is the bundled quick-start)."""
    path = str(context.run_config.get("config", "") or "")
    if not path:
        raise ConfigError(
            "the run config names no experiment: set its key `config` to a YAML path, absolute or relative to the "
            f"app's directory {APP_DIR} (e.g. --run-config \"config='simulations/configs/quickstart.yaml'\")"
        )
    return load_config(APP_DIR / path)
