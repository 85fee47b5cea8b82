"""Which experiment the ClientApp (and the ServerApp) runs under ``flwr run``: the run config key ``config``."""

import tomllib
from pathlib import Path

import pytest
import yaml
from flwr.app import Context, RecordDict

from fedpub.clients.app_config import APP_DIR, experiment_config
from fedpub.config import ConfigError, load_config
from fedpub.simulations.configs import quickstart_config_path


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


def _node(node_config: dict) -> Context:
    return Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})


def test_a_partition_id_out_of_range_is_a_clear_error(tmp_path: Path):
    from fedpub.clients.client_app import node_runtime
    from fedpub.config import parse_config

    config = parse_config({"data": {"path": str(tmp_path), "eval_users": "all",  # 3 users: none to hold out
                                    "synthetic": {"num_writers": 3, "min_examples": 2, "max_examples": 4}}})
    assert node_runtime(_node({"partition-id": 2}), config)[1] == "f0000_02"
    with pytest.raises(ConfigError, match=r"partition-id=3 is out of range: .* 3 node users \(partition ids 0\.\.2\)"):
        node_runtime(_node({"partition-id": 3}), config)


def test_a_device_node_holds_its_folders_user_and_declares_only_what_its_config_says(tmp_path: Path):
    from fedpub.clients.client_app import declared_public, node_runtime
    from fedpub.config import parse_config
    from fedpub.data.device_user_writers import export_user
    from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, write_synthetic_emnist

    write_synthetic_emnist(tmp_path / "world", SyntheticEmnistSpec(num_writers=2, min_examples=2, max_examples=4))
    folder = export_user(tmp_path / "world" / "fed_emnist_digitsonly_train.h5", "f0000_01", tmp_path / "me")
    config = parse_config({"data": {"source": "emnist_h5", "path": str(tmp_path / "nowhere")}})
    rt, cid = node_runtime(_node({"data-path": str(folder), "client-id": "f0000_01"}), config)
    assert cid == "f0000_01" and rt.train.client_ids == [cid] and len(rt.client_data(cid)) > 0
    assert [declared_public(_node(c)) for c in ({}, {"public": True}, {"public": "false"})] == [None, True, False]
    with pytest.raises(ConfigError, match="node config: public=.maybe. is not a flag: give true or false"):
        declared_public(_node({"public": "maybe"}))
