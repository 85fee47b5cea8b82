"""One writer per run directory: an OS advisory lock (``fcntl.flock``) on ``<dir>/.lock``.

The kernel drops the lock when its holder exits, however it dies (Ctrl-C, SIGKILL, a crash), so a killed run never
leaves a stale lock behind. The holder writes who it is (PID, host, command, start time) into the lock file, and a
second run of the same directory is refused with those figures. The file is removed when the lock is released; a
process that locked a file someone else removed in the meantime notices (the path no longer names the file it
holds) and tries again, so two processes never hold the same directory. POSIX only (Linux, macOS).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path
from types import TracebackType

LOCK_NAME = ".lock"


class RunDirectoryLocked(RuntimeError):
    """Another process is running in this directory."""


def _holder() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python",
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }


def describe_holder(text: str) -> str:
    """The holder recorded in a lock file's ``text``, in words."""
    try:
        holder = json.loads(text)
        return (f"PID {holder['pid']} on {holder['host']}, started {holder['started']}: "
                f"{holder['command']}")
    except (ValueError, KeyError, TypeError):
        return "another process (it has not written its details yet)"


def lock_holder(root: Path) -> str | None:
    """Who holds the lock of ``root``, in words, or None when nobody does (nothing is created or changed)."""
    try:
        fd = os.open(Path(root) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return describe_holder(os.read(fd, 4096).decode(errors="replace"))
    finally:
        os.close(fd)  # also drops the shared lock
    return None


class RunLock:
    """The lock of the directory ``root`` (created if missing: see :attr:`created`). ``what`` names the directory in
    the refusal ("run directory", "sweep directory")."""

    def __init__(self, root: Path, what: str = "run directory") -> None:
        self.root, self.what = Path(root), what
        self.path = self.root / LOCK_NAME
        self.created: list[Path] = []
        """The directories this lock created (innermost last), removed on release when left empty."""
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock, or raise :class:`RunDirectoryLocked` naming its holder."""
        missing = [p for p in (self.root, *self.root.parents) if not p.exists()]
        self.root.mkdir(parents=True, exist_ok=True)
        self.created = list(reversed(missing))
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 4096).decode(errors="replace")
                os.close(fd)
                self._remove_created()
                raise RunDirectoryLocked(
                    f"{self.root} is in use by {describe_holder(holder)}; wait for it to finish or stop it "
                    f"(its lock ends with the process: {self.path})"
                ) from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # its holder removed the file between our open and our lock: lock the new one
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(_holder()).encode())
        self._fd = fd
        return self

    def release(self, *, remove_empty: bool = True) -> None:
        """Remove the lock file and drop the lock; ``remove_empty``: also the directories the lock created,
        when they are empty (a run that wrote nothing leaves nothing)."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # still locked: a process waiting on this file re-checks the path
        os.close(self._fd)
        self._fd = None
        if remove_empty:
            self._remove_created()

    def _remove_created(self) -> None:
        for directory in reversed(self.created):
            try:
                directory.rmdir()
            except OSError:  # not empty (or gone): keep it
                break
        self.created = []

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
