"""Supervising the processes of a local Flower deployment: starting each in its own process group with the
deployment's environment (offline switches, this venv's binaries, a marker that its children inherit), waiting
for a port, and stopping every one of them (and their detached children) on exit, Ctrl-C, SIGTERM or errors.
Linux/macOS only (process groups); leftovers are found through the environment marker on Linux (``/proc``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fedpub.simulations.flower.environment import FLOWER_OFFLINE_ENV

VENV_BIN = Path(sys.executable).parent
"""Where ``flower-superlink``, ``flower-supernode`` and ``flwr`` of this interpreter live."""

MARKER_VAR = "FEDPUB_DEPLOYMENT_ID"
"""Set in the environment of every process started here; children inherit it, so leftovers
(e.g. the detached ``flower-superexec`` of the SuperLink) can be found and stopped."""

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
                signal_group(process.pid, signal.SIGTERM)
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
                    signal_group(process.pid, signal.SIGKILL)
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


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``pid`` leads (nothing when it is gone or not ours)."""
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


def run_tool(command: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60) -> str:
    """Run ``command`` to its end and return its stdout; raise :class:`DeploymentError` if it fails."""
    result = subprocess.run(
        list(command), env=None if env is None else dict(env), capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise DeploymentError(
            f"`{' '.join(command)}` failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result.stdout


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
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

