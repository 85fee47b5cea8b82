"""Driving Flower's own programs: the ``flwr`` CLI (its ``config.toml`` connection, SuperNode registration and
listing, run status, ``flwr run``) and the ``flower-superlink`` and ``flower-supernode`` processes, started under
a :class:`~fedpub.simulations.flower.deploy.processes.ProcessRegistry` with this interpreter's binaries.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpub.simulations.flower.deploy.processes import (
    LOCALHOST,
    VENV_BIN,
    DeploymentError,
    ManagedProcess,
    ProcessRegistry,
    deployment_env,
    free_ports,
    run_tool,
    signal_group,
    wait_for_port,
)
from fedpub.simulations.flower.deploy.tls import TlsFiles

REPO_ROOT = Path(__file__).resolve().parents[3]
"""The Flower App directory (``pyproject.toml`` with ``[tool.flwr.app]``)."""

CONNECTION = "fedpub-local"
"""The name of the SuperLink connection in the CLI's ``config.toml``."""


# -- the CLI's configuration and commands -----------------------------------------------------------------
def write_connection(
    flwr_home: Path,
    address: str,
    *,
    name: str = CONNECTION,
    root_certificates: Path | None = None,
) -> Path:
    """Write ``$FLWR_HOME/config.toml`` with one SuperLink connection ``name`` (the default):
    insecure, or TLS verified against ``root_certificates``."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    lines = ["[superlink]", f'default = "{name}"', "", f"[superlink.{name}]", f'address = "{address}"']
    if root_certificates is None:
        lines.append("insecure = true")
    else:
        lines.append(f'root-certificates = "{Path(root_certificates).resolve()}"')
    path = flwr_home / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def flwr_cli(args: Sequence[str], *, env: Mapping[str, str], timeout: float = 60) -> str:
    """Run ``flwr ARGS`` and return its stdout; raise :class:`DeploymentError` if it fails."""
    return run_tool([str(VENV_BIN / "flwr"), *args], env=env, timeout=timeout)


def register_supernode(public_key: Path, *, env: Mapping[str, str], connection: str = CONNECTION) -> int:
    """``flwr supernode register KEY.pub CONNECTION``; returns the new node id."""
    out = flwr_cli(["supernode", "register", str(public_key), connection, "--format", "json"], env=env)
    data = _json_from(out)
    node_id = data.get("node-id", data.get("node_id"))
    if not data.get("success", True) or node_id is None:
        raise DeploymentError(f"registering {public_key} failed: {out}")
    return int(node_id)


def list_supernodes(*, env: Mapping[str, str], connection: str = CONNECTION) -> list[dict[str, Any]]:
    """``flwr supernode list CONNECTION --format json``: one dict per registered/connected node."""
    out = flwr_cli(["supernode", "list", connection, "--format", "json"], env=env)
    data = _json_from(out)
    return list(data.get("nodes", []))


def run_status(run_id: int, *, env: Mapping[str, str], connection: str = CONNECTION) -> str:
    """The run's status as ``flwr ls --run-id`` reports it, e.g. ``finished:completed``."""
    out = flwr_cli(["ls", connection, "--run-id", str(run_id), "--format", "json"], env=env)
    runs = _json_from(out).get("runs", [])
    return str(runs[0].get("status", "unknown")) if runs else "unknown"


def _json_from(text: str) -> dict[str, Any]:
    """The JSON object in ``text`` (the CLI may print notices before it)."""
    start = text.find("{")
    if start < 0:
        raise DeploymentError(f"no JSON in flwr output:\n{text}")
    return json.loads(text[start:])


# -- the SuperLink, the SuperNodes and flwr run --------------------------------------------------------------
def start_superlink(
    registry: ProcessRegistry,
    *,
    port: int,
    env: Mapping[str, str],
    log_dir: Path,
    host: str = LOCALHOST,
    tls: TlsFiles | None = None,
    enable_supernode_auth: bool = False,
    database: Path | None = None,
    cwd: Path | None = None,
    ready_timeout: float = 60.0,
    simulation: bool = False,
) -> ManagedProcess:
    """Start ``flower-superlink`` (insecure, or TLS with ``tls``) on ``host:port`` and wait until it
    accepts connections. Runtime dependency installation is disabled. Its state (runs, SuperNodes) is
    kept in memory, or in the SQLite file ``database``, where a restarted SuperLink finds it again. With
    ``simulation`` it runs each run in Flower's Simulation Engine (virtual SuperNodes, ``flwr-simulation``), as
    the local SuperLink ``flwr run .`` starts does."""
    command = [str(VENV_BIN / "flower-superlink"), "--host", host, "--port", str(port),
               "--disable-runtime-dependency-installation"]
    if simulation:
        command.append("--simulation")
    if database is not None:
        command += ["--database", str(database)]
    if tls is None:
        if enable_supernode_auth:
            raise DeploymentError("SuperNode authentication needs TLS")
        command.append("--insecure")
    else:
        command += ["--ssl-ca-certfile", str(tls.ca_cert), "--ssl-certfile", str(tls.server_cert),
                    "--ssl-keyfile", str(tls.server_key)]
        if enable_supernode_auth:
            command.append("--enable-supernode-auth")
    process = registry.start("superlink", command, env=env, cwd=cwd or Path.cwd(),
                             log_path=log_dir / "superlink.log")
    wait_for_port(LOCALHOST if host in ("0.0.0.0", "::") else host, port, ready_timeout, process)
    return process


def start_supernode(
    registry: ProcessRegistry,
    *,
    superlink: str,
    port: int,
    node_config: str,
    env: Mapping[str, str],
    log_path: Path,
    root_certificates: Path | None = None,
    auth_key: Path | None = None,
    max_retries: int | None = None,
    cwd: Path | None = None,
    name: str = "supernode",
) -> ManagedProcess:
    """Start one ``flower-supernode`` connected to ``superlink`` (``host:port``)."""
    command = [str(VENV_BIN / "flower-supernode"), "--superlink", superlink, "--port", str(port),
               "--node-config", node_config]
    command += ["--insecure"] if root_certificates is None else ["--root-certificates", str(root_certificates)]
    if auth_key is not None:
        command += ["--auth-supernode-private-key", str(auth_key)]
    if max_retries is not None:
        command += ["--max-retries", str(max_retries)]
    return registry.start(name, command, env=env, cwd=cwd or Path.cwd(), log_path=log_path)


def start_supernodes(
    registry: ProcessRegistry,
    num_nodes: int,
    *,
    superlink: str,
    work_dir: Path,
    env: Mapping[str, str],
    ports: Sequence[int] | None = None,
    node_configs: Sequence[str] | None = None,
    root_certificates: Path | None = None,
    auth_keys: Sequence[Path] | None = None,
    cwd: Path | None = None,
) -> list[ManagedProcess]:
    """Start ``num_nodes`` SuperNodes, node i with ``partition-id=i num-partitions=N`` (unless
    ``node_configs`` says otherwise), its own Runtime API port and its own ``FLWR_HOME`` (where it
    installs the app), logging to ``work_dir/logs/supernode-i.log``."""
    ports = list(ports) if ports is not None else free_ports(num_nodes)
    configs = list(node_configs) if node_configs is not None else [
        f"partition-id={i} num-partitions={num_nodes}" for i in range(num_nodes)
    ]
    if len(ports) != num_nodes or len(configs) != num_nodes:
        raise ValueError("one port and one node config per SuperNode")
    nodes = []
    for i in range(num_nodes):
        node_env = deployment_env(work_dir / "nodes" / f"{i}" / "flwr-home", registry.marker, base=env)
        nodes.append(
            start_supernode(
                registry, superlink=superlink, port=ports[i], node_config=configs[i], env=node_env,
                log_path=work_dir / "logs" / f"supernode-{i}.log", root_certificates=root_certificates,
                auth_key=None if auth_keys is None else auth_keys[i], cwd=cwd, name=f"supernode-{i}",
            )
        )
    return nodes


@dataclass(frozen=True)
class FlwrRunResult:
    """What ``flwr run`` printed and returned, the run's id and its final status (as the SuperLink reports it)."""

    returncode: int
    run_id: int | None
    output: str
    status: str | None
    wall_time: float


def flwr_run(
    registry: ProcessRegistry,
    config_path: Path | None,
    *,
    env: Mapping[str, str],
    log_path: Path,
    connection: str = CONNECTION,
    app_dir: Path = REPO_ROOT,
    timeout: float = 3600.0,
    echo: bool = True,
    cwd: Path | None = None,
    num_supernodes: int | None = None,
    run_config: str | None = None,
) -> FlwrRunResult:
    """``flwr run APP CONNECTION --run-config "config='CONFIG'" --stream`` (with ``--federation-config
    "num-supernodes=N"`` for a simulation SuperLink); waits for the stream to end (the run finished) or
    ``timeout``, then asks the SuperLink for the run's status. Another app (``app_dir``, e.g. an example) takes its
    own ``run_config`` string instead of fedpub's ``config_path``."""
    if run_config is None:
        assert config_path is not None, "give fedpub's experiment config_path, or another app's run_config"
        config_arg = str(Path(config_path).resolve())
        if "'" in config_arg:
            raise DeploymentError(f"the config path must not contain a single quote: {config_arg}")
        run_config = f"config='{config_arg}'"
    command = [str(VENV_BIN / "flwr"), "run", str(app_dir), connection, "--run-config", run_config, "--stream"]
    if num_supernodes is not None:
        command += ["--federation-config", f"num-supernodes={num_supernodes}"]
    started = time.monotonic()
    process = registry.start("flwr-run", command, env=env, cwd=cwd or Path.cwd(), stdout=subprocess.PIPE)
    timer = threading.Timer(timeout, signal_group, (process.pid, signal.SIGTERM))
    timer.daemon = True
    timer.start()
    lines: list[str] = []
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with log_path.open("w") as log:
            assert process.popen.stdout is not None
            for raw in process.popen.stdout:
                line = raw.decode(errors="replace")
                lines.append(line)
                log.write(line)
                log.flush()
                if echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()
        returncode = process.popen.wait()
    finally:
        timer.cancel()
    wall = time.monotonic() - started
    output = "".join(lines)
    match = re.search(r"Successfully started run (\d+)", _strip_ansi(output))
    run_id = int(match.group(1)) if match else None
    status = None
    if run_id is not None:
        with contextlib.suppress(DeploymentError, subprocess.TimeoutExpired, ValueError):
            status = run_status(run_id, env=env, connection=connection)
    if wall >= timeout:
        raise DeploymentError(f"flwr run did not finish within {timeout:g} s (run {run_id}, status {status})")
    return FlwrRunResult(returncode, run_id, output, status, wall)


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)
