"""Which Ray a Flower simulation runs on (Issue 35.2): ``flower.ray_address`` or ``RAY_ADDRESS`` attaches to a
running cluster without passing resources, neither starts a new local Ray (``address="local"``) that never attaches
to a Ray already running on the machine, and an address nothing answers at is refused before the simulation starts.

The end-to-end case starts a real 2-node Ray cluster on this machine (two ``ray start --block`` processes with their
own temp dirs, stopped by their PIDs) and runs ``fedpub run --backend flower`` on it (~1 min), so it runs only when
asked for: ``pytest -m ray_cluster``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedpub.config import FlowerConfig, parse_config
from fedpub.simulations.tools.cli import app
from fedpub.simulations.flower.deploy.processes import VENV_BIN
from fedpub.simulations.flower.simulation import backend_config, ray_init_args
from tests.simulations.test_deployment import selected, three_user_dir, write_experiment  # noqa: F401

HEAD = "10.1.2.3:6379"
START_LOG = "ray-start.log"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_without_an_address_fedpub_starts_its_own_local_ray():
    """``address="local"``: a new Ray even where ``ray start --head`` runs (a bare ``ray.init()`` would attach)."""
    assert ray_init_args(FlowerConfig(ray_num_cpus=2), {}) == {"address": "local", "num_cpus": 2}
    assert ray_init_args(FlowerConfig(), {"RAY_ADDRESS": ""}) == {"address": "local", "num_cpus": os.cpu_count() or 1}


def test_an_address_attaches_without_resources():
    assert ray_init_args(FlowerConfig(ray_address=HEAD), {}) == {"address": HEAD}
    assert ray_init_args(FlowerConfig(), {"RAY_ADDRESS": HEAD}) == {"address": HEAD}
    assert ray_init_args(FlowerConfig(ray_address=HEAD), {"RAY_ADDRESS": "10.9.9.9:1"}) == {"address": HEAD}


def test_cpus_for_a_local_ray_are_refused_with_an_address():
    with pytest.raises(ValueError, match="drop ray_num_cpus or ray_address"):
        parse_config({"flower": {"ray_address": HEAD, "ray_num_cpus": 2}})
    with pytest.raises(ValueError, match="drop flower.ray_num_cpus or unset RAY_ADDRESS"):
        ray_init_args(FlowerConfig(ray_num_cpus=2), {"RAY_ADDRESS": HEAD})


def test_a_port_where_something_else_listens_is_refused_in_seconds_naming_the_field(monkeypatch):
    """Issue 44, item 6: a port that accepts connections but is no Ray head (here a bare listening socket that
    never answers) passed the connection check and ``ray.init`` hung there (stopped after 11.5 min); the GCS
    handshake refuses it within its timeout. (The ray_cluster test attaches to a real head through it.)"""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with socket.create_server(("127.0.0.1", 0)) as head:
        address = f"127.0.0.1:{head.getsockname()[1]}"
        with pytest.raises(ValueError, match=f"flower.ray_address: something listens at {address}, but no Ray head "
                                             "answered a GCS request there within 10 s"):
            backend_config(FlowerConfig(ray_address=address))


def test_an_address_nothing_answers_at_is_refused_naming_the_field(monkeypatch):
    address = f"127.0.0.1:{_free_port()}"
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ValueError, match=f"flower.ray_address: no Ray cluster answers at {address}"):
        backend_config(FlowerConfig(ray_address=address))
    monkeypatch.setenv("RAY_ADDRESS", address)
    with pytest.raises(ValueError, match=f"RAY_ADDRESS: no Ray cluster answers at {address}"):
        backend_config(FlowerConfig())
    with pytest.raises(ValueError, match="host:port of a Ray cluster's head.*'auto'"):
        backend_config(FlowerConfig(ray_address="auto"))


def test_fedpub_run_on_an_unreachable_cluster_stops_before_the_simulation(
    three_user_dir, tmp_path, monkeypatch  # noqa: F811
):
    """The CLI says which field and address, and no ServerApp started: no run directory, no node wait."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    address = f"127.0.0.1:{_free_port()}"
    config = write_experiment(tmp_path / "exp.yaml", three_user_dir, tmp_path / "runs", rounds=1,
                              flower={"ray_address": address, "node_wait_timeout": 600})
    result = CliRunner().invoke(app, ["run", str(config), "--backend", "flower"])
    assert result.exit_code == 2, result.output
    assert f"flower.ray_address: no Ray cluster answers at {address}" in " ".join(result.output.split())
    assert not (tmp_path / "runs" / "deploy").exists()


def _ray_start(temp_dir: Path, *args: str) -> subprocess.Popen:
    """``ray start --block`` of a 1-CPU node in its own session (stopped by its PID), its output in ``temp_dir``."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    with (temp_dir / START_LOG).open("w") as out:
        return subprocess.Popen(
            [str(VENV_BIN / "ray"), "start", "--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
             "--temp-dir", str(temp_dir), "--dashboard-agent-listen-port", str(_free_port()),
             "--metrics-export-port", str(_free_port()), *args],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )


def _wait_started(process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 180
    while "Ray runtime started" not in log.read_text():
        assert process.poll() is None, f"ray start exited {process.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"ray start did not start its node:\n{log.read_text()}"
        time.sleep(0.5)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to ``ray start --block``, which stops the node's processes; its process group killed if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def two_node_cluster(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[Path]]]:
    """A head and a second node, 1 CPU each, each with its own temp dir under /tmp (Ray's socket paths must be
    short); yields the head's address and the temp dirs. Started only under ``-m ray_cluster``."""
    if not selected(request.config, "ray_cluster"):
        pytest.skip("a 2-node Ray cluster on this machine (~1 min); select it with -m ray_cluster")
    port = _free_port()
    temp_dirs = [Path(tempfile.mkdtemp(prefix=f"fedpub-ray{i}-", dir="/tmp")) for i in range(2)]
    processes: list[subprocess.Popen] = []
    try:
        processes.append(_ray_start(temp_dirs[0], "--head", "--port", str(port), "--include-dashboard", "false",
                                    "--ray-client-server-port", str(_free_port())))
        _wait_started(processes[0], temp_dirs[0] / START_LOG)
        processes.append(_ray_start(temp_dirs[1], "--address", f"127.0.0.1:{port}"))
        _wait_started(processes[1], temp_dirs[1] / START_LOG)
        yield f"127.0.0.1:{port}", temp_dirs
    finally:
        for process in reversed(processes):
            _stop(process)
        for temp_dir in temp_dirs:
            shutil.rmtree(temp_dir, ignore_errors=True)


def _nodes_with_client_actors(temp_dirs: list[Path]) -> list[Path]:
    """The temp dirs whose node ran a Flower ClientApp actor (Ray tags an actor worker's log with its class)."""
    return [d for d in temp_dirs if any(":actor_name:ClientAppActor" in log.read_text(errors="replace")
                                        for log in d.glob("session_*/logs/worker-*.out"))]


@pytest.mark.slow
@pytest.mark.ray_cluster
def test_fedpub_run_on_a_two_node_ray_cluster(two_node_cluster, three_user_dir, tmp_path):  # noqa: F811
    """``fedpub run --backend flower`` with ``flower.ray_address`` completes on the cluster, its ClientApp actors
    on both nodes (1 CPU each, one actor per CPU), and the nodes are still the cluster's after the run."""
    address, temp_dirs = two_node_cluster
    config = write_experiment(tmp_path / "exp.yaml", three_user_dir, tmp_path / "runs", rounds=2,
                              flower={"ray_address": address, "client_num_cpus": 1})
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = subprocess.run([str(VENV_BIN / "fedpub"), "run", str(config), "--backend", "flower"],
                         capture_output=True, text=True, env=env, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert f"Flower simulation on the Ray cluster at {address} (flower.ray_address)" in output
    assert (tmp_path / "runs" / "deploy" / "summary.md").exists()
    assert _nodes_with_client_actors(temp_dirs) == temp_dirs, output
