"""A Flower deployment on this machine: a real SuperLink, N SuperNodes and ``flwr run``.

``python -m simulations.deploy_local --config EXP.yaml [--nodes N] [--rounds R] [--tls]`` starts
``flower-superlink`` on 127.0.0.1 (a free port), N ``flower-supernode`` processes (node i holds
``partition-id=i``, i.e. the i-th user of the training file), writes a private ``FLWR_HOME`` with a
``config.toml`` connection, runs ``flwr run <repo> <connection> --run-config "config='EXP.yaml'"
--stream`` and waits for it. Every process it started is stopped at the end, also on Ctrl-C, on
SIGTERM and on errors. Results are written by the ServerApp into ``<output_dir>/<name>/`` exactly
like ``fedpub run``. With ``--tls`` the SuperLink gets a self-signed CA and server certificate
(``openssl``) and ``--enable-supernode-auth``; each SuperNode gets an EC key pair (``ssh-keygen``)
registered with ``flwr supernode register`` before it starts.

The building blocks (:func:`start_superlink`, :func:`start_supernodes`, :func:`make_tls_certificates`,
:func:`make_node_key`, :func:`register_supernode`, :func:`flwr_run`, :meth:`ProcessRegistry.stop_all`)
are used by ``tests/simulations/test_deployment.py``; ``docs/deployment.md`` has the recipe for real
devices. Linux/macOS only (process groups); leftovers are found through an environment marker on
Linux (``/proc``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from simulations.flower_env import FLOWER_OFFLINE_ENV

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The Flower App directory (``pyproject.toml`` with ``[tool.flwr.app]``)."""

VENV_BIN = Path(sys.executable).parent
"""Where ``flower-superlink``, ``flower-supernode`` and ``flwr`` of this interpreter live."""

MARKER_VAR = "FEDPUB_DEPLOYMENT_ID"
"""Set in the environment of every process started here; children inherit it, so leftovers
(e.g. the detached ``flower-superexec`` of the SuperLink) can be found and stopped."""

CONNECTION = "fedpub-local"
MAX_DEFAULT_NODES = 64
LOCALHOST = "127.0.0.1"


class DeploymentError(RuntimeError):
    """A process did not start, a command failed, or the run did not complete."""


# -- environment and ports ------------------------------------------------------------------------
def deployment_env(
    flwr_home: Path, marker: str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment for a Flower process: offline switches, this venv first on PATH, its own
    ``FLWR_HOME`` and the deployment marker."""
    env = dict(os.environ if base is None else base)
    env.update(FLOWER_OFFLINE_ENV)
    env["PYTHONUNBUFFERED"] = "1"  # their logs are read as they are written
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", "")])
    env["FLWR_HOME"] = str(flwr_home)
    env[MARKER_VAR] = marker
    Path(flwr_home).mkdir(parents=True, exist_ok=True)
    return env


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = LOCALHOST) -> list[int]:
    """``count`` distinct free ports (held open together while picking, so they differ)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


# -- processes ------------------------------------------------------------------------------------
@dataclass
class ManagedProcess:
    """A process started here, leader of its own process group (session)."""

    name: str
    popen: subprocess.Popen
    log_path: Path | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    return True


def marked_pids(marker: str) -> set[int]:
    """PIDs of live processes whose environment carries ``FEDPUB_DEPLOYMENT_ID=marker`` (Linux;
    an empty set where ``/proc`` is missing)."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found: set[int] = set()
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and pid_alive(int(entry.name)):
            found.add(int(entry.name))
    return found


@dataclass
class ProcessRegistry:
    """Every process a deployment starts; :meth:`stop_all` ends them all (and their children)."""

    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    processes: list[ManagedProcess] = field(default_factory=list)
    seen_pids: set[int] = field(default_factory=set)
    """Every PID observed as ours (started here or carrying the marker) — for checks afterwards."""

    def start(
        self,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path | None = None,
        stdout: int | IO[Any] | None = None,
    ) -> ManagedProcess:
        """Start ``command`` in a new session; output goes to ``log_path`` (or ``stdout``)."""
        if dict(env).get(MARKER_VAR) != self.marker:
            env = {**env, MARKER_VAR: self.marker}
        log_file = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_file = log_path.open("ab")
        try:
            popen = subprocess.Popen(
                list(command),
                env=dict(env),
                cwd=str(cwd),
                stdin=subprocess.DEVNULL,
                stdout=log_file if log_file is not None else stdout,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: Ctrl-C here does not reach it
            )
        finally:
            if log_file is not None:
                log_file.close()  # the child holds its own descriptor
        process = ManagedProcess(name, popen, log_path)
        self.processes.append(process)
        self.seen_pids.add(popen.pid)
        return process

    def live_pids(self) -> set[int]:
        """Our processes that are still running, including detached children (via the marker)."""
        pids = {p.pid for p in self.processes if p.alive()} | marked_pids(self.marker)
        self.seen_pids |= pids
        return pids

    def stop_all(self, grace: float = 8.0) -> None:
        """SIGTERM every process group we started (last started first) and every marked process,
        wait up to ``grace`` seconds, then SIGKILL what is left; reap our children. A second
        Ctrl-C (or SIGTERM) meanwhile is held back until everything is stopped."""
        with _signals_deferred():
            self._stop_all(grace)

    def _stop_all(self, grace: float) -> None:
        self.live_pids()  # remember the detached children before their parents go
        for process in reversed(self.processes):
            if process.alive():
                _signal_group(process.pid, signal.SIGTERM)
        for pid in marked_pids(self.marker):
            self.seen_pids.add(pid)
            _signal_pid(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.live_pids():
            time.sleep(0.2)
        for _ in range(3):
            left = self.live_pids()
            if not left:
                break
            for process in self.processes:
                if process.alive():
                    _signal_group(process.pid, signal.SIGKILL)
            for pid in left:
                _signal_pid(pid, signal.SIGKILL)
            time.sleep(0.5)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=2)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM (main thread only) and re-deliver the first one caught at the end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)
        if caught:
            signal.raise_signal(caught[0])


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def wait_for_port(host: str, port: int, timeout: float, process: ManagedProcess | None = None) -> None:
    """Wait until something accepts TCP connections on ``host:port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and not process.alive():
            raise DeploymentError(f"{process.name} exited with {process.popen.returncode}:\n{process.log_tail()}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.2)
    raise DeploymentError(f"nothing listens on {host}:{port} after {timeout:g} s")


# -- certificates and keys ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path


def _run_tool(command: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60) -> str:
    result = subprocess.run(
        list(command), env=None if env is None else dict(env), capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise DeploymentError(
            f"`{' '.join(command)}` failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result.stdout


def make_tls_certificates(
    directory: Path, hosts: Sequence[str] = (LOCALHOST, "localhost"), days: int = 365
) -> TlsFiles:
    """A self-signed CA and a server certificate it signs, valid for ``hosts`` (IPs and DNS
    names become subjectAltName entries), made with ``openssl``."""
    if shutil.which("openssl") is None:
        raise DeploymentError("openssl is needed for --tls")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    server_key, server_csr, server_cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ext = directory / "server.ext"
    san = ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in hosts)
    ext.write_text(
        f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    _run_tool(["openssl", "genrsa", "-out", str(ca_key), "2048"])
    _run_tool(["openssl", "req", "-x509", "-new", "-key", str(ca_key), "-sha256", "-days", str(days),
               "-subj", "/CN=fedpub local CA", "-out", str(ca_cert)])
    _run_tool(["openssl", "genrsa", "-out", str(server_key), "2048"])
    _run_tool(["openssl", "req", "-new", "-key", str(server_key), "-subj", f"/CN={hosts[0]}",
               "-out", str(server_csr)])
    _run_tool(["openssl", "x509", "-req", "-in", str(server_csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
               "-CAcreateserial", "-days", str(days), "-sha256", "-extfile", str(ext), "-out", str(server_cert)])
    return TlsFiles(ca_cert, ca_key, server_cert, server_key)


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class NodeKey:
    private: Path
    public: Path


def make_node_key(directory: Path, name: str) -> NodeKey:
    """An ECDSA P-384 key pair for SuperNode authentication (``ssh-keygen``; no passphrase)."""
    if shutil.which("ssh-keygen") is None:
        raise DeploymentError("ssh-keygen is needed for SuperNode authentication")
    directory.mkdir(parents=True, exist_ok=True)
    private = directory / name
    for path in (private, private.with_name(name + ".pub")):
        path.unlink(missing_ok=True)
    _run_tool(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", name, "-f", str(private)])
    return NodeKey(private, private.with_name(name + ".pub"))


# -- Flower CLI configuration ---------------------------------------------------------------------------
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
    return _run_tool([str(VENV_BIN / "flwr"), *args], env=env, timeout=timeout)


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


# -- the components ---------------------------------------------------------------------------------------
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
) -> ManagedProcess:
    """Start ``flower-superlink`` (insecure, or TLS with ``tls``) on ``host:port`` and wait until it
    accepts connections. Runtime dependency installation is disabled. Its state (runs, SuperNodes) is
    kept in memory, or in the SQLite file ``database``, where a restarted SuperLink finds it again."""
    command = [str(VENV_BIN / "flower-superlink"), "--host", host, "--port", str(port),
               "--disable-runtime-dependency-installation"]
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
    returncode: int
    run_id: int | None
    output: str
    status: str | None
    wall_time: float


def flwr_run(
    registry: ProcessRegistry,
    config_path: Path,
    *,
    env: Mapping[str, str],
    log_path: Path,
    connection: str = CONNECTION,
    app_dir: Path = REPO_ROOT,
    timeout: float = 3600.0,
    echo: bool = True,
    cwd: Path | None = None,
) -> FlwrRunResult:
    """``flwr run APP CONNECTION --run-config "config='CONFIG'" --stream``; waits for the stream to
    end (the run finished) or ``timeout``, then asks the SuperLink for the run's status."""
    config_arg = str(Path(config_path).resolve())
    if "'" in config_arg:
        raise DeploymentError(f"the config path must not contain a single quote: {config_arg}")
    command = [str(VENV_BIN / "flwr"), "run", str(app_dir), connection,
               "--run-config", f"config='{config_arg}'", "--stream"]
    started = time.monotonic()
    process = registry.start("flwr-run", command, env=env, cwd=cwd or Path.cwd(), stdout=subprocess.PIPE)
    timer = threading.Timer(timeout, _signal_group, (process.pid, signal.SIGTERM))
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


# -- the whole deployment ---------------------------------------------------------------------------------
@dataclass
class LocalDeployment:
    """A SuperLink and its SuperNodes on this machine, with a CLI ``FLWR_HOME`` that knows how to
    reach it. Use as a context manager: leaving it stops every process it started."""

    work_dir: Path
    num_nodes: int
    tls: bool = False
    cwd: Path = field(default_factory=Path.cwd)
    database: Path | None = None
    """The SuperLink's SQLite state file (``--database``); None: in memory, lost when it dies."""
    node_configs: Sequence[str] | None = None
    """One ``--node-config`` per SuperNode (e.g. ``client-id="f0000_00"``); None: node i holds ``partition-id=i``."""
    registry: ProcessRegistry = field(default_factory=ProcessRegistry)
    superlink: ManagedProcess | None = None
    supernodes: list[ManagedProcess] = field(default_factory=list)
    superlink_port: int = 0
    tls_files: TlsFiles | None = None
    node_keys: list[NodeKey] = field(default_factory=list)
    cli_env: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{LOCALHOST}:{self.superlink_port}"

    @property
    def logs(self) -> Path:
        return self.work_dir / "logs"

    def start(self) -> LocalDeployment:
        """SuperLink, CLI connection, (with TLS: certificates, node keys registered), SuperNodes."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.cli_env = deployment_env(self.work_dir / "flwr-home", self.registry.marker)
        ports = free_ports(self.num_nodes + 1)
        self.superlink_port, node_ports = ports[0], ports[1:]
        if self.tls:
            self.tls_files = make_tls_certificates(self.work_dir / "certs")
            self.node_keys = [make_node_key(self.work_dir / "keys", f"supernode-{i}") for i in range(self.num_nodes)]
        self.launch_superlink()
        write_connection(self.work_dir / "flwr-home", self.address,
                         root_certificates=self.tls_files.ca_cert if self.tls_files else None)
        for key in self.node_keys:
            register_supernode(key.public, env=self.cli_env)
        self.supernodes = start_supernodes(
            self.registry, self.num_nodes, superlink=self.address, work_dir=self.work_dir, env=self.cli_env,
            ports=node_ports, node_configs=self.node_configs,
            root_certificates=self.tls_files.ca_cert if self.tls_files else None,
            auth_keys=[k.private for k in self.node_keys] if self.node_keys else None, cwd=self.cwd,
        )
        return self

    def launch_superlink(self) -> ManagedProcess:
        """Start the SuperLink on ``superlink_port``; after it died, start it again there with the same
        settings (the SuperNodes keep retrying that address)."""
        self.superlink = start_superlink(
            self.registry, port=self.superlink_port,
            env=deployment_env(self.work_dir / "superlink-home", self.registry.marker), log_dir=self.logs,
            tls=self.tls_files, enable_supernode_auth=self.tls, database=self.database, cwd=self.cwd,
        )
        return self.superlink

    def run(self, config_path: Path, *, timeout: float = 3600.0, echo: bool = True) -> FlwrRunResult:
        return flwr_run(self.registry, config_path, env=self.cli_env, log_path=self.logs / "flwr-run.log",
                        timeout=timeout, echo=echo, cwd=self.cwd)

    def stop(self) -> None:
        self.registry.stop_all()

    def __enter__(self) -> LocalDeployment:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into KeyboardInterrupt so ``finally`` blocks run (Ctrl-C already does)."""
    def handler(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)


def experiment_file(config: Path, rounds: int | None, work_dir: Path) -> Path:
    """The YAML to run: ``config``, rewritten into ``work_dir`` only when ``rounds`` overrides its
    number of rounds."""
    import yaml

    from fedpub.config import load_config

    path = Path(config).resolve()
    load_config(path)  # fail here, before anything starts
    if rounds is None:
        return path
    raw = yaml.safe_load(path.read_text()) or {}
    raw["rounds"] = rounds
    derived = work_dir / f"{path.stem}.rounds{rounds}.yaml"
    work_dir.mkdir(parents=True, exist_ok=True)
    derived.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_config(derived)
    return derived


def count_users(config_path: Path) -> int:
    """How many private users (= SuperNodes the ServerApp waits for) the experiment's data has."""
    from fedpub.config import load_config
    from simulations.experiment import load_data

    train = load_data(load_config(config_path)).train
    return len(train.client_ids)


def results_dir(config_path: Path, cwd: Path) -> Path:
    from fedpub.config import load_config

    cfg = load_config(config_path)
    return (cwd / cfg.output_dir / cfg.name).resolve()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.deploy_local",
        description="Run an experiment as a real Flower deployment on this machine: flower-superlink, "
        "one flower-supernode per user, `flwr run`; every process is stopped at the end.",
    )
    parser.add_argument("--config", type=Path, required=True,
                        help="experiment YAML; relative paths in it are resolved against the current directory, "
                        "as with `fedpub run`")
    parser.add_argument("--nodes", type=int, default=None,
                        help="number of SuperNodes (default: the number of users in the training data, which "
                        f"the ServerApp waits for, at most {MAX_DEFAULT_NODES}); node i holds the i-th user "
                        "(partition-id=i)")
    parser.add_argument("--rounds", type=int, default=None, help="override the config's number of rounds")
    parser.add_argument("--tls", action="store_true",
                        help="TLS (self-signed CA via openssl) and SuperNode authentication (ssh-keygen EC keys "
                        "registered with `flwr supernode register`)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where certificates, keys, FLWR_HOMEs and logs go (default: a new temp dir, kept)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the run (default 3600)")
    parser.add_argument("--quiet", action="store_true", help="do not echo the run's log stream")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cwd = Path.cwd()
    from fedpub.config import ConfigError, load_config

    try:
        load_config(args.config)
        work_dir = (args.work_dir or Path(tempfile.mkdtemp(prefix="fedpub-deploy-"))).resolve()
        config_path = experiment_file(args.config, args.rounds, work_dir)
        num_nodes = args.nodes if args.nodes is not None else count_users(config_path)
    except (ConfigError, OSError, ValueError) as err:
        print(f"fedpub deploy: {err}", file=sys.stderr)
        return 2
    if num_nodes < 1:
        print("fedpub deploy: --nodes must be at least 1", file=sys.stderr)
        return 2
    if args.nodes is None and num_nodes > MAX_DEFAULT_NODES:
        print(f"fedpub deploy: the data has {num_nodes} users, i.e. {num_nodes} SuperNode processes on this "
              f"machine; pass --nodes {num_nodes} if you mean it", file=sys.stderr)
        return 2
    print(f"fedpub deploy: {num_nodes} SuperNodes, {'TLS + node auth' if args.tls else 'insecure'}, "
          f"work dir {work_dir}", flush=True)
    deployment = LocalDeployment(work_dir, num_nodes, tls=args.tls, cwd=cwd)
    result: FlwrRunResult | None = None
    try:
        with _stop_on_signals(), deployment:
            print(f"fedpub deploy: SuperLink on {deployment.address}; SuperNodes up; running {config_path}",
                  flush=True)
            result = deployment.run(config_path, timeout=args.timeout, echo=not args.quiet)
    except KeyboardInterrupt:
        print("\nfedpub deploy: interrupted; all processes stopped", file=sys.stderr)
        return 130
    except DeploymentError as err:
        print(f"fedpub deploy: {err}\nlogs: {deployment.logs}", file=sys.stderr)
        return 1
    print(f"fedpub deploy: all processes stopped; logs in {deployment.logs}")
    ok = result is not None and result.returncode == 0 and (result.status or "").endswith("completed")
    status = None if result is None else result.status
    if not ok:
        if args.quiet and result is not None:
            print("".join(result.output.splitlines(keepends=True)[-15:]), file=sys.stderr)
        print(f"fedpub deploy: the run did not complete (status {status}); see {deployment.logs}", file=sys.stderr)
        return 1
    print(f"fedpub deploy: run {result.run_id} {status} in {result.wall_time:.1f} s; "
          f"results in {results_dir(config_path, cwd)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
