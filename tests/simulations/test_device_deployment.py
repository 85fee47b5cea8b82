"""Devices with their own data, on a real SuperLink with SuperNodes and `flwr run` (127.0.0.1).

One run of 2 rounds of DOPE with ``flower.private_users: nodes`` (~60 s on 2 cores): each of the 3 private
SuperNodes holds only its own user's PNG folder (``data-path``) and signs its user id with its key; the server's
files hold only the public user (its server-held pool) and evaluation writers, none of the private users. A fourth
node claims a private user that another node already holds (a cloned device: same folder, same key), a fifth an
id the user registry does not know: both are refused, and the run goes on with N = 3, its ε that of q = m/3.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import dp_accounting
import pytest
import yaml

from fedpub.config import load_config
from fedpub.data.device_user_writers import export_user
from fedpub.data.emnist import EmnistH5
from fedpub.data.emnist_writers import read_emnist_clients, write_emnist_h5
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, write_synthetic_emnist
from fedpub.privacy.accountant import epsilon_for
from fedpub.privacy.events import PoissonSampling
from fedpub.privacy.ledger import read_ledger_event
from fedpub.simulations.flower.deploy.flwr_cli import list_supernodes
from fedpub.simulations.flower.deploy.local import LocalDeployment
from fedpub.simulations.flower.deploy.processes import VENV_BIN
from fedpub.simulations.flower.deploy.tls import make_node_key
from tests.simulations.test_deployment import assert_all_stopped, needs_tls_tools, run_records

pytestmark = [
    pytest.mark.slow,  # real SuperLink/SuperNode processes: pytest -m 'not slow' skips them
    pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX-only"),
    pytest.mark.skipif(
        not (VENV_BIN / "flower-superlink").exists(), reason="flower-superlink is not installed next to python"
    ),
]

WRITERS = {"num_writers": 5, "min_examples": 6, "max_examples": 12, "seed": 4}
PRIVATE, PUBLIC, EVAL_ONLY = ["f0000_00", "f0000_02", "f0000_03"], "f0000_01", "f0000_04"
INTRUDER = "f0000_99"
NOISE, COHORT, DELTA, ROUNDS = 1.0, 2, 1e-5, 2
STEM = "fed_emnist_digitsonly"
SHUTDOWN = "SuperNode terminated gracefully"
"""What a SuperNode logs when the deployment stops it."""


def server_files(world: Path, server: Path) -> None:
    """The server's data: the public user's training examples, the public and eval-only writers' test examples."""
    with EmnistH5(world / f"{STEM}_train.h5") as train, EmnistH5(world / f"{STEM}_test.h5") as test:
        train_users, test_users = read_emnist_clients(train), read_emnist_clients(test)
    write_emnist_h5(server / f"{STEM}_train.h5", {PUBLIC: train_users[PUBLIC]})
    write_emnist_h5(server / f"{STEM}_test.h5", {c: test_users[c] for c in (PUBLIC, EVAL_ONLY)})


def experiment(path: Path, server_data: Path, registry: Path, out: Path) -> Path:
    raw = {
        "name": "devices", "seed": 3, "rounds": ROUNDS, "eval_every": 1, "checkpoint_every": 1,
        "output_dir": str(out), "device": "cpu",
        "data": {"source": "emnist_h5", "path": str(server_data), "eval_clients": 2},
        "model": {"name": "emnist_small_cnn"},
        "client": {"epochs": 1, "batch_size": 4, "lr": 0.05},
        "strategy": {"name": "dope", "public_clients_per_round": 1, "clip_norm": 0.5, "noise_multiplier": NOISE,
                     "sampling": {"kind": "poisson", "clients_per_round": COHORT}},
        "privacy": {"delta": DELTA},
        "flower": {"node_wait_timeout": 90, "round_timeout": 120, "private_users": "nodes",
                   "expected_private_nodes": len(PRIVATE), "user_registry": str(registry)},
    }
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@needs_tls_tools  # ssh-keygen makes the node keys
@pytest.mark.extended  # ~70 s of real SuperNodes: -m extended
def test_devices_with_their_own_folders_and_a_registry_refusing_a_duplicate_and_an_unknown_id(
    tmp_path: Path,
) -> None:
    world, server, devices = tmp_path / "world", tmp_path / "server", tmp_path / "devices"
    write_synthetic_emnist(world, SyntheticEmnistSpec(**WRITERS))
    server_files(world, server)
    keys = {cid: make_node_key(tmp_path / "keys", cid) for cid in [*PRIVATE, INTRUDER]}
    registry = tmp_path / "registry.yaml"
    registry.write_text(yaml.safe_dump({"users": {
        cid: {"public": False, "key": keys[cid].public.read_text().strip()} for cid in PRIVATE
    }}))
    folders = {cid: export_user(world / f"{STEM}_train.h5", cid, devices / cid) for cid in PRIVATE}
    folders[INTRUDER] = export_user(world / f"{STEM}_train.h5", EVAL_ONLY, devices / INTRUDER)

    def node(cid: str, extra: str = "") -> str:
        return f'data-path="{folders[cid]}" private-key="{keys[cid].private}"{extra}'

    node_configs = [
        node(PRIVATE[0], ' public=false'),  # its declaration agrees with the registry
        node(PRIVATE[1]),                   # the folder's name is the user id
        node(PRIVATE[2], f' client-id="{PRIVATE[2]}"'),
        node(PRIVATE[1]),                   # a clone of the second device: the same user, folder and key
        node(INTRUDER),                     # an id the registry does not hold
    ]
    config_path = experiment(tmp_path / "exp.yaml", server, registry, tmp_path / "runs")
    # the server's files hold none of the private users
    for split in ("train", "test"):
        with EmnistH5(server / f"{STEM}_{split}.h5") as held:
            assert not set(held.client_ids) & set(PRIVATE), split

    deployment = LocalDeployment(tmp_path / "deploy", num_nodes=len(node_configs), node_configs=node_configs,
                                 cwd=tmp_path)
    started = time.monotonic()
    with deployment:
        deadline = time.monotonic() + 60  # every node online before the run, so discovery asks them all at once
        while len(list_supernodes(env=deployment.cli_env)) < len(node_configs) and time.monotonic() < deadline:
            time.sleep(1)
        result = deployment.run(config_path, timeout=300, echo=False)
    print(f"device deployment: flwr run {result.wall_time:.1f} s, total {time.monotonic() - started:.1f} s")
    output = result.output
    assert result.status == "finished:completed", output[-4000:]
    assert "fedpub: 3 private and 0 public nodes, 2 refused" in output, output[-4000:]
    assert f"claim user {PRIVATE[1]}: node " in output and "is refused" in output, output[-4000:]
    assert f"claims user {INTRUDER}: user {INTRUDER} is not in the registry {registry}" in output, output[-4000:]

    cfg = load_config(config_path)
    root = cfg.output_dir / cfg.name
    records = run_records(cfg)
    assert [r["round"] for r in records] == list(range(ROUNDS))
    assert [r["public_cohort_used"] for r in records] == [1] * ROUNDS  # the server's pool trained
    sampling = PoissonSampling(COHORT / len(PRIVATE))  # q = m / N, N the registered private nodes
    for r in records:
        assert r["epsilon"] == pytest.approx(epsilon_for(sampling, NOISE, r["round"] + 1, DELTA), rel=1e-6)
    ledger = json.loads((root / "ledger.json").read_text())
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=ledger["pld_discretization"])
    accountant.compose(read_ledger_event(root / "ledger.json"))
    expected = accountant.get_epsilon(DELTA)
    assert ledger["epsilon"] == pytest.approx(expected, rel=1e-6)
    assert ledger["epsilon"] == pytest.approx(epsilon_for(sampling, NOISE, ROUNDS, DELTA), rel=1e-6)
    assert "| private users N | 3 " in (root / "summary.md").read_text()
    for i in range(len(PRIVATE)):  # the private devices read their folders and trained without an error
        log = (deployment.logs / f"supernode-{i}.log").read_text(errors="replace")
        # up to their stop: a SuperExec still sending Flower's exit event when its SuperNode passes on the stop
        # signal dies of a KeyboardInterrupt with a traceback (Flower's shutdown, after the run)
        until_stopped = log.split(SHUTDOWN)[0]
        assert "Traceback" not in until_stopped, until_stopped[-3000:]
    assert_all_stopped(deployment.registry)
