"""Federated CIFAR-100 end to end, on look-alike files in TFF's layout: a tiny private run of TFF's ResNet-18 through
the engine, the bundled config, and `fedpub data info | verify | download` on its files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from fedpub.config import load_config, parse_config
from fedpub.data.cifar100 import TEST_FILE, TRAIN_FILE
from fedpub.data.cifar100_writers import SyntheticCifar100Spec, write_synthetic_cifar100
from fedpub.simulations.configs import quickstart_config_path
from fedpub.simulations.tools.data_cli import data_app
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.data.test_download import FileServer, serve_registry_file, server, tar_bz2  # noqa: F401

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(data_app, list(args), terminal_width=200)
    return result.exit_code, result.output


def test_a_tiny_private_run_trains_tffs_resnet18(tmp_path: Path) -> None:
    config = parse_config({
        "name": "cifar", "rounds": 2, "eval_every": 1, "device": "cpu", "output_dir": str(tmp_path / "runs"),
        "data": {"source": "synthetic_cifar100", "path": str(tmp_path / "cifar"), "eval_clients": 1,
                 "eval_users": "all",  # TFF's test clients share ids with other training users: asked for
                 "synthetic_cifar100": {"num_clients": 6, "test_clients": 1, "examples_per_client": 3}},
        "model": {"name": "cifar100_resnet18_gn"},
        "client": {"batch_size": 3, "lr": 0.05},
        "strategy": {"noise_multiplier": 0.5, "clip_norm": 1.0, "sampling": {"clients_per_round": 2}},
    })
    experiment = build_experiment(config)
    assert len(experiment.private_ids) == 6 and experiment.train.num_classes == 100
    initial = dict(experiment.new_model().named_parameters())
    result = run_in_process(experiment, RunDirectory(config.output_dir / config.name))
    records = [json.loads(x) for x in (config.output_dir / "cifar" / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2 and 0.0 <= records[-1]["eval_accuracy"] <= 1.0 and records[-1]["epsilon"] > 0
    assert result.final_metrics["eval_accuracy"] == records[-1]["eval_accuracy"]
    assert result.params.keys() == initial.keys()
    assert all(not torch.equal(initial[k].detach(), result.params[k]) for k in initial)  # noise reaches every tensor


def test_the_bundled_config_is_valid_and_runs_on_look_alike_files() -> None:
    config = load_config(quickstart_config_path().parent / "cifar100.yaml")
    assert config.data.source == "synthetic_cifar100" and config.model.name == "cifar100_resnet18_gn"
    assert config.task == "classification"


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("cifar100")
    write_synthetic_cifar100(directory, SyntheticCifar100Spec(num_clients=3, test_clients=2, examples_per_client=4))
    return directory


def test_info_describes_the_dataset_and_its_files(cifar_dir: Path) -> None:
    code, out = invoke("info", "cifar100")
    assert code == 0, out
    assert "cifar100_h5" in out and "synthetic_cifar100" in out and "cifar100_resnet18_gn" in out
    assert "fed_cifar100.tar.bz2" in out and "e8575e22c038ecef1ce6c7d492d7abee7da13b1e1ba9b70a7fc18531ba7590de" in out
    code, out = invoke("info", str(cifar_dir / TRAIN_FILE))
    assert code == 0, out
    assert "federated CIFAR-100, TFF HDF5" in out and "clients: 3" in out and "examples: 12 " in out


def test_verify_checks_every_client_and_names_a_bad_one(cifar_dir: Path, tmp_path: Path) -> None:
    code, out = invoke("verify", str(cifar_dir))
    assert code == 0, out
    assert "superclasses:" in out and "2 of 2 file(s) ok" in out
    import h5py

    broken = tmp_path / TEST_FILE
    broken.write_bytes((cifar_dir / TEST_FILE).read_bytes())
    with h5py.File(broken, "a") as f:
        f["examples"]["1"]["coarse_label"][0] = 20
    code, out = invoke("verify", str(broken))
    assert code == 1 and "client '1' has coarse_label in" in out and "outside [0, 19]" in out


def test_download_by_dataset_name_verifies_and_extracts(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, cifar_dir: Path, tmp_path: Path  # noqa: F811
) -> None:
    body = tar_bz2({name: (cifar_dir / name).read_bytes() for name in (TRAIN_FILE, TEST_FILE)})
    serve_registry_file(server, monkeypatch, "fed_cifar100.tar.bz2", body, hashlib.sha256(body).hexdigest())
    code, out = invoke("download", "cifar100", "--dir", str(tmp_path))
    assert code == 0, out
    assert (tmp_path / TRAIN_FILE).read_bytes() == (cifar_dir / TRAIN_FILE).read_bytes()
    code, out = invoke("verify", str(tmp_path))
    assert code == 0 and "3 of 3 file(s) ok" in out and "checksum: matches" in out
    code, out = invoke("download", "emnist", "--dir", str(tmp_path))
    assert code == 2 and "dataset emnist has 3 files: name one of fed_emnist.tar.bz2" in out
