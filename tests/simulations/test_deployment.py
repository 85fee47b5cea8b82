"""A real Flower deployment on 127.0.0.1: flower-superlink, flower-supernode processes and `flwr run`.

An insecure run of 2 rounds of DOPE (4 writers, 1 of them public, so N = 3 private users; ~50 s on 2 cores) with
the public user as its own SuperNode (``flower.public_users: nodes``: 4 SuperNodes named by ``partition-id``, the
public one sent TRAIN messages). The server-held public pool (``server``) runs on a real SuperLink in
``test_device_deployment.py``, whose private users hold their own data. The TLS test checks SuperNode authentication (a registered key gets in, an unregistered
one is refused, ~10 s). A full DP-FedAvg run over TLS + authentication takes about as long as an insecure one and
runs only when asked for: ``pytest -m deployment_tls``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

import fedpub
from fedpub.config import ExperimentConfig, load_config
from fedpub.data.public_split import split_public
from fedpub.data.users import load_data
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, write_synthetic_emnist
from fedpub.models.seeded import model_params
from fedpub.privacy.accountant import epsilon_for
from fedpub.privacy.events import PoissonSampling
from fedpub.simulations.flower.deploy.flwr_cli import (
    REPO_ROOT,
    list_supernodes,
    register_supernode,
    start_superlink,
    start_supernode,
    write_connection,
)
from fedpub.simulations.flower.deploy.local import LocalDeployment
from fedpub.simulations.flower.deploy.processes import (
    MARKER_VAR,
    VENV_BIN,
    ProcessRegistry,
    deployment_env,
    free_ports,
    marked_pids,
    pid_alive,
)
from fedpub.simulations.flower.deploy.tls import make_node_key, make_tls_certificates
from fedpub.simulations.run.experiment import build_experiment

pytestmark = [
    pytest.mark.slow,  # real SuperLink/SuperNode processes: pytest -m 'not slow' skips them
    pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX-only"),
    pytest.mark.skipif(
        not (VENV_BIN / "flower-superlink").exists(), reason="flower-superlink is not installed next to python"
    ),
]
needs_tls_tools = pytest.mark.skipif(
    shutil.which("openssl") is None or shutil.which("ssh-keygen") is None, reason="needs openssl and ssh-keygen"
)

THREE_USERS = {"num_writers": 3, "min_examples": 6, "max_examples": 12, "seed": 1}
FOUR_USERS = {**THREE_USERS, "num_writers": 4}
NOISE, USERS, COHORT, DELTA = 1.0, 3, 2, 1e-5
PUBLIC = {"fraction": 0.25, "seed": 0}
"""1 of the 4 writers is public: f0000_01, the second one (so the private users' partition ids are 0, 2, 3)."""
PUBLIC_COHORT = 1
DOPE = {"name": "dope", "public_clients_per_round": PUBLIC_COHORT}


@pytest.fixture(scope="module")
def three_user_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("three_users")
    write_synthetic_emnist(directory, SyntheticEmnistSpec(**THREE_USERS))
    return directory


@pytest.fixture(scope="module")
def four_user_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("four_users")
    write_synthetic_emnist(directory, SyntheticEmnistSpec(**FOUR_USERS))
    return directory


def write_experiment(
    path: Path,
    data_dir: Path,
    out_dir: Path,
    rounds: int,
    *,
    synthetic: dict = THREE_USERS,
    strategy: dict | None = None,
    public: dict | None = None,
    flower: dict | None = None,
    privacy: dict | None = None,
) -> Path:
    """DP-FedAvg over the three-user data unless told otherwise; ``strategy`` entries override the defaults,
    ``public`` is ``data.public``, ``flower`` and ``privacy`` entries are added to those sections."""
    raw = {
        "name": "deploy",
        "seed": 3,
        "rounds": rounds,
        "eval_every": 1,
        "checkpoint_every": 1,
        "output_dir": str(out_dir.resolve()),
        "device": "cpu",
        "data": {"source": "synthetic_emnist", "path": str(data_dir.resolve()), "synthetic": synthetic,
                 "eval_clients": 3},
        "model": {"name": "emnist_small_cnn"},
        "client": {"epochs": 1, "batch_size": 4, "lr": 0.05},
        "strategy": {"name": "dp_fedavg", "clip_norm": 0.5, "noise_multiplier": NOISE,
                     "sampling": {"kind": "poisson", "clients_per_round": COHORT}, **(strategy or {})},
        "privacy": {"delta": DELTA, **(privacy or {})},
        "flower": {"node_wait_timeout": 60, "round_timeout": 120, **(flower or {})},
    }
    if public is not None:
        raw["data"]["public"] = public
    else:  # every user private (N counts them all), evaluated on their test examples, labelled: asked for
        raw["data"]["eval_users"] = "all"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def still_ours(pid: int, marker: str) -> bool:
    """``pid`` runs and is still one of ours (its environment has the marker; a PID the system
    reused for another process does not count). Without /proc: just whether it runs."""
    if not Path("/proc").is_dir():
        return pid_alive(pid)
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{MARKER_VAR}={marker}".encode() in environ and pid_alive(pid)


def assert_all_stopped(registry: ProcessRegistry) -> None:
    assert registry.seen_pids, "no process was recorded"
    alive = sorted(pid for pid in registry.seen_pids if still_ours(pid, registry.marker))
    assert alive == [], f"processes still running: {alive}"
    assert marked_pids(registry.marker) == set()


def users_of(cfg: ExperimentConfig) -> tuple[list[str], list[str], list[str]]:
    """(the training file's users in order, the private users, the public users) as ``split_public`` makes them."""
    users = list(load_data(cfg).train.client_ids)
    private, public = split_public(users, cfg.data.public.fraction, cfg.data.public.seed)
    return users, private, public


def expected_sampling(cfg: ExperimentConfig) -> PoissonSampling:
    """Poisson sampling of the expected cohort over the N *private* users (public users are not in N)."""
    sampling = cfg.strategy.sampling
    assert sampling.kind == "poisson" and sampling.clients_per_round is not None
    _, private, _ = users_of(cfg)
    return PoissonSampling(sampling.clients_per_round / len(private))


def run_records(cfg: ExperimentConfig) -> list[dict]:
    return [json.loads(line) for line in (cfg.output_dir / cfg.name / "metrics.jsonl").read_text().splitlines()]


def check_completed_run(config_path: Path, rounds: int) -> None:
    """metrics.jsonl reports ε (on evaluation rounds and the last) as dp_accounting computes it for q = cohort /
    N_private and the config's noise multiplier; the model moved away from its init."""
    cfg = load_config(config_path)
    root = cfg.output_dir / cfg.name
    for name in ("config.yaml", "metrics.jsonl", "ledger.json", "checkpoint.pt", "summary.md"):
        assert (root / name).stat().st_size > 0, name
    # a deployment draws its noise and cohorts from a secret seed and releases no diagnostics
    assert json.loads((root / "ledger.json").read_text())["randomness"].startswith("secret")
    assert not (root / "diagnostics.jsonl").exists()
    records = run_records(cfg)
    assert [r["round"] for r in records] == list(range(rounds))
    sampling, noise, delta = expected_sampling(cfg), cfg.strategy.noise_multiplier, cfg.privacy.delta
    assert noise is not None and cfg.strategy.adaptive_clip is None  # one Gaussian of z per round
    for r in records:
        if "epsilon" in r:
            assert r["epsilon"] == pytest.approx(epsilon_for(sampling, noise, r["round"] + 1, delta), rel=1e-6)
    assert records[-1]["epsilon"] == pytest.approx(epsilon_for(sampling, noise, rounds, delta), rel=1e-6)

    checkpoint = torch.load(root / "checkpoint.pt", weights_only=True)
    assert checkpoint["rounds_done"] == rounds
    initial = model_params(build_experiment(cfg).new_model())
    trained = checkpoint["params"]
    assert trained.keys() == initial.keys()
    assert any(not torch.equal(trained[k].cpu(), initial[k].cpu()) for k in initial), "the model did not change"


def check_public_rounds(config_path: Path, rounds: int) -> None:
    """Every round the public cohort trained (on the server or on its nodes) and recentered DOPE's clip."""
    cfg = load_config(config_path)
    records = run_records(cfg)
    assert len(records) == rounds
    assert [r["public_cohort_used"] for r in records] == [cfg.strategy.public_clients_per_round] * rounds
    assert all(r["recenter/center_norm"] > 0 for r in records), [r.get("recenter/center_norm") for r in records]


def dope_experiment(tmp_path: Path, data_dir: Path, public_users: str, rounds: int) -> Path:
    return write_experiment(
        tmp_path / "exp.yaml", data_dir, tmp_path / "runs", rounds=rounds, synthetic=FOUR_USERS, strategy=DOPE,
        public=PUBLIC, flower={"public_users": public_users},
    )


def deploy_and_check(
    deployment: LocalDeployment, config_path: Path, rounds: int, num_nodes: int, public_nodes: int
) -> None:
    """Run ``config_path`` on ``deployment``; the run completes, the ServerApp found the private and
    ``public_nodes`` public nodes, ε and the public rounds are right, every process started here (SuperLink,
    ``num_nodes`` SuperNodes, flwr run) and their children are stopped."""
    pyproject_before = _sha256(REPO_ROOT / "pyproject.toml")
    started = time.monotonic()
    with deployment:
        assert len(deployment.supernodes) == num_nodes
        result = deployment.run(config_path, timeout=300, echo=False)
    wall = time.monotonic() - started
    print(f"deployment: flwr run {result.wall_time:.1f} s, total {wall:.1f} s (logs: {deployment.logs})")

    assert result.returncode == 0, result.output[-3000:]
    assert result.run_id is not None
    assert result.status == "finished:completed", result.output[-3000:]
    assert f"fedpub: {USERS} private and {public_nodes} public nodes" in result.output, result.output[-3000:]
    check_completed_run(config_path, rounds=rounds)
    check_public_rounds(config_path, rounds=rounds)
    # stopped: the processes started here and their children (SuperExecs, app processes)
    assert len(deployment.registry.processes) == 1 + num_nodes + 1
    assert len(deployment.registry.seen_pids) > len(deployment.registry.processes)
    assert_all_stopped(deployment.registry)
    assert _sha256(REPO_ROOT / "pyproject.toml") == pyproject_before, "flwr run rewrote pyproject.toml"


@pytest.mark.extended  # ~1 min; the suite runs DOPE with public nodes under flwr run (quickstart_dp)
def test_dope_with_public_users_on_their_own_supernodes(four_user_dir: Path, tmp_path: Path) -> None:
    """``flower.public_users: nodes``: one SuperNode per user of the training file (``partition-id=i``), the public
    user's among them; it declares itself public and trains the public cohort when sent TRAIN messages."""
    config_path = dope_experiment(tmp_path, four_user_dir, "nodes", rounds=2)
    users, private, public = users_of(load_config(config_path))
    assert public == ["f0000_01"] and len(private) == USERS
    deployment = LocalDeployment(tmp_path / "deploy", num_nodes=len(users), cwd=tmp_path)
    deploy_and_check(deployment, config_path, rounds=2, num_nodes=len(users), public_nodes=1)
    # the public user's node (partition-id 1) was sent the public cohort's TRAIN message every round
    public_log = (deployment.logs / f"supernode-{users.index(public[0])}.log").read_text(errors="replace")
    assert public_log.count("Receiving: train message") == 2, public_log[-3000:]


@pytest.mark.extended  # ~1 min; torchrun, Flower simulation and the drop-in strategy run banded MF too
def test_banded_mf_noise_with_dope_on_real_supernodes(four_user_dir: Path, tmp_path: Path) -> None:
    """Banded MF noise (b = 2, cyclic Poisson cohorts over 2 groups) with DOPE's public users on a real SuperLink and
    one SuperNode per user: the run completes with the noise step's state checkpointed, and its ε and ledger events
    are the same config's in process (the cohorts and noise differ: a deployment draws them from a secret seed)."""
    banded = {**DOPE, "sampling": {"kind": "cyclic_poisson", "clients_per_round": 1, "groups": 2},
              "noise": {"kind": "banded_mf", "bands": 2, "factorization": "bsr"}}
    config_path = write_experiment(tmp_path / "exp.yaml", four_user_dir, tmp_path / "runs", rounds=3,
                                   synthetic=FOUR_USERS, strategy=banded, public=PUBLIC,
                                   flower={"public_users": "nodes"})
    users, _, _ = users_of(load_config(config_path))
    deployment = LocalDeployment(tmp_path / "deploy", num_nodes=len(users), cwd=tmp_path)
    with deployment:
        result = deployment.run(config_path, timeout=300, echo=False)
    assert result.returncode == 0 and result.status == "finished:completed", result.output[-3000:]
    assert_all_stopped(deployment.registry)
    cfg = load_config(config_path)
    root = cfg.output_dir / cfg.name
    local = fedpub.run(cfg.model_copy(update={"name": "in_process"}))
    assert [r["round"] for r in run_records(cfg)] == [0, 1, 2]
    assert run_records(cfg)[-1]["epsilon"] == pytest.approx(local.epsilon, rel=1e-9)
    deployed_ledger = json.loads((root / "ledger.json").read_text())
    local_ledger = json.loads((local.run_dir / "ledger.json").read_text())
    assert deployed_ledger["event"] == local_ledger["event"]
    state = torch.load(root / "checkpoint.pt", weights_only=True)["strategy_state"]
    assert len(state["noise"]["history"]) == 1  # the last b − 1 noise vectors, kept for the next round


@needs_tls_tools
def test_tls_superlink_admits_a_registered_supernode_and_refuses_an_unregistered_one(tmp_path: Path) -> None:
    registry = ProcessRegistry()
    try:
        tls = make_tls_certificates(tmp_path / "certs")
        cli_env = deployment_env(tmp_path / "flwr-home", registry.marker)
        link_port, good_port, bad_port = free_ports(3)
        address = f"127.0.0.1:{link_port}"
        start_superlink(registry, port=link_port, env=deployment_env(tmp_path / "link-home", registry.marker),
                        log_dir=tmp_path / "logs", tls=tls, enable_supernode_auth=True, cwd=tmp_path)
        write_connection(tmp_path / "flwr-home", address, root_certificates=tls.ca_cert)
        good = make_node_key(tmp_path / "keys", "registered")
        bad = make_node_key(tmp_path / "keys", "unregistered")
        node_id = register_supernode(good.public, env=cli_env)
        assert [(int(n["node-id"]), n["status"]) for n in list_supernodes(env=cli_env)] == [(node_id, "registered")]

        def node(name: str, key: Path, port: int, partition: int):
            return start_supernode(
                registry, superlink=address, port=port, node_config=f"partition-id={partition} num-partitions=2",
                env=deployment_env(tmp_path / name, registry.marker), log_path=tmp_path / "logs" / f"{name}.log",
                root_certificates=tls.ca_cert, auth_key=key, max_retries=1, cwd=tmp_path, name=name,
            )

        registered = node("registered", good.private, good_port, 0)
        intruder = node("unregistered", bad.private, bad_port, 1)
        deadline = time.monotonic() + 45
        nodes: list[dict] = []
        while time.monotonic() < deadline:
            nodes = list_supernodes(env=cli_env)
            if intruder.popen.poll() is not None and any(n["status"] == "online" for n in nodes):
                break
            time.sleep(1)
        assert [(int(n["node-id"]), n["status"]) for n in nodes] == [(node_id, "online")]
        assert registered.alive(), registered.log_tail()
        assert intruder.popen.poll() not in (None, 0), "the unregistered SuperNode was not refused"
        assert "Failed to activate SuperNode" in intruder.log_tail(60)
    finally:
        registry.stop_all()
    assert_all_stopped(registry)


def selected(config: pytest.Config, marker: str) -> bool:
    expression = str(config.getoption("markexpr") or "")
    return marker in expression and f"not {marker}" not in expression


@needs_tls_tools
@pytest.mark.deployment_tls
def test_a_run_completes_over_tls_with_authenticated_supernodes(
    three_user_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if not selected(request.config, "deployment_tls"):
        pytest.skip("a full TLS deployment run (~60 s); select it with -m deployment_tls")
    config_path = write_experiment(tmp_path / "exp.yaml", three_user_dir, tmp_path / "runs", rounds=1)
    deployment = LocalDeployment(tmp_path / "deploy", num_nodes=USERS, tls=True, cwd=tmp_path)
    with deployment:
        nodes = list_supernodes(env=deployment.cli_env)
        assert len(nodes) == USERS
        result = deployment.run(config_path, timeout=300, echo=False)
    assert result.status == "finished:completed", result.output[-3000:]
    check_completed_run(config_path, rounds=1)
    assert_all_stopped(deployment.registry)
