"""Which experiment the ClientApp (and the ServerApp) runs under ``flwr run``: the run config key ``config``."""

import tomllib
from pathlib import Path

import pytest
import yaml
from flwr.app import Context, RecordDict

from clients.client_app import APP_DIR, experiment_config
from fedpub.config import ConfigError, load_config
from simulations.configs import quickstart_config_path


def _context(run_config: dict) -> Context:
    return Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=run_config)


def test_the_apps_default_run_config_is_the_bundled_quickstart():
    defaults = tomllib.loads((APP_DIR / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert experiment_config(_context(defaults)) == load_config(quickstart_config_path())


def test_a_config_path_is_absolute_or_relative_to_the_app_directory(tmp_path: Path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"name": "mine", "strategy": {"noise_multiplier": 1.0}}))
    assert experiment_config(_context({"config": str(mine)})).name == "mine"
    bundled = quickstart_config_path().parent / "public_emnist.yaml"
    relative = str(bundled.relative_to(APP_DIR))
    assert experiment_config(_context({"config": relative})) == load_config(bundled)


def test_a_run_config_naming_no_experiment_is_refused():
    for run_config in ({}, {"config": ""}):
        with pytest.raises(ConfigError, match="the run config names no experiment: set its key `config`"):
            experiment_config(_context(run_config))
