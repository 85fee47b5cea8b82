"""What fedpub says about an unexpected error: a short report of a few lines, and the full traceback in a file.

Why: a traceback that prints each frame's local variables (rich's and Typer's default) prints the users' examples,
labels and model weights those frames hold, the data the framework protects, by the thousand lines. DESIGN §2:
nothing we print contains a user's data. So a report holds the exception's type and the traceback's frames (file,
line, function and source line) only: never a local variable, never an object's ``repr``. An exception's message is
kept only as :func:`fedpub.safe_text.safe_message` keeps it (one short line, withheld when it looks as if it holds
data). The full traceback goes to a file of its own (mode 0600) under
``${XDG_STATE_HOME:-~/.local/state}/fedpub/errors/``, since the run directory is not always known.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import fedpub
import fedpub.clients
import fedpub.simulations
import fedpub.strategies
from fedpub.safe_text import WITHHELD, safe_message

SHORT_FRAMES = 3
"""The innermost frames the short report lists."""


@dataclass(frozen=True)
class Frame:
    """One frame of a traceback, as a report shows it: where, never what it held."""

    file: str
    """The file's path, from its package's folder when it is on the import path."""
    line: int
    function: str
    source: str
    """The frame's source line (code, read from the file), stripped; empty when the file cannot be read."""
    ours: bool
    """Whether the file is fedpub's (the core, strategies, clients, simulations)."""

    def where(self) -> str:
        """``file:line in function``."""
        return f"{self.file}:{self.line} in {self.function}"


def _fedpub_folders() -> list[Path]:
    """fedpub's package folders: the core, and strategies, clients and simulations wherever they lie (beside the
    core in a source tree, inside it installed)."""
    return [Path(str(package.__file__)).resolve().parent
            for package in (fedpub, fedpub.strategies, fedpub.clients, fedpub.simulations)]


def _shown_path(path: Path, ours: list[Path]) -> str:
    """``path`` from the folder holding its package: fedpub's from the folder above its package's, any other from
    the longest entry of the import path holding it (``torch/nn/functional.py``); else as it is."""
    bases = [folder.parent for folder in ours if path.is_relative_to(folder)]
    bases += [Path(entry).resolve() for entry in sys.path if entry and path.is_relative_to(Path(entry).resolve())]
    return str(path.relative_to(max(bases, key=lambda base: len(base.parts)))) if bases else str(path)


def _frame(summary: traceback.FrameSummary, ours: list[Path]) -> Frame:
    if summary.filename.startswith("<"):  # <string>, <frozen ...>: no file to read or to place
        return Frame(summary.filename, summary.lineno or 0, summary.name, "", False)
    path = Path(summary.filename).resolve()
    return Frame(_shown_path(path, ours), summary.lineno or 0, summary.name, (summary.line or "").strip(),
                 any(path.is_relative_to(folder) for folder in ours))


def frames(tb: TracebackType | None) -> list[Frame]:
    """The frames of a traceback, outermost first; no local variable is read (``capture_locals`` stays off)."""
    ours = _fedpub_folders()
    return [_frame(summary, ours) for summary in traceback.extract_tb(tb)]


def type_name(error: BaseException) -> str:
    """The exception's class, with its module unless it is a built-in (``torch.OutOfMemoryError``, ``ValueError``)."""
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def error_message(error: BaseException) -> str:
    """The exception's message through :func:`safe_message` (:data:`WITHHELD` when its ``str`` fails)."""
    try:
        return safe_message(str(error))
    except Exception:  # noqa: BLE001 — a broken __str__ says nothing
        return WITHHELD


def _chain(error: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or while handling, outermost cause first (as Python prints)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return chain[::-1]


def _headline(error: BaseException) -> str:
    message = error_message(error)
    return f"{type_name(error)}: {message}" if message else type_name(error)


def full_report(error: BaseException) -> str:
    """The traceback of ``error`` and of the exceptions it chains, in Python's layout, with each message through
    :func:`safe_message` and no local variable."""
    parts = []
    for position, link in enumerate(_chain(error)):
        if position:
            parts.append("\nThe above exception was the direct cause of the following exception:\n\n"
                         if link.__cause__ is not None else
                         "\nDuring handling of the above exception, another exception occurred:\n\n")
        parts.append("Traceback (most recent call last):\n")
        for frame in frames(link.__traceback__):
            parts.append(f'  File "{frame.file}", line {frame.line}, in {frame.function}\n')
            parts.append(f"    {frame.source}\n" if frame.source else "")
        parts.append(_headline(link) + "\n")
    return "".join(parts)


def error_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_STATE_HOME/fedpub/errors`` (``~/.local/state`` when it is unset or not an absolute path)."""
    state = environ.get("XDG_STATE_HOME", "")
    return (Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state") / "fedpub" / "errors"


def write_full_report(error: BaseException, folder: Path | None = None) -> Path:
    """Write :func:`full_report` with the command line to ``<folder>/<UTC time>-<pid>.log`` (mode 0600; the folder,
    :func:`error_folder` by default, made with mode 0700) and return its path. Raises ``OSError``."""
    folder = folder or error_folder()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    path = folder / f"{stamp}-{os.getpid()}.log"
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(handle, "w", encoding="utf-8") as out:
        out.write(f"command: {' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}\n")
        out.write(f"python {sys.version.split()[0]}, pid {os.getpid()}, {stamp}\n\n")
        out.write(full_report(error))
    return path


def short_report(error: BaseException, log: Path | str) -> list[str]:
    """At most five lines: ``error: unexpected <type> in <fedpub's innermost frame>: <message>``, the innermost
    :data:`SHORT_FRAMES` frames, and where the full traceback is (``log``, a path) or why it was not written (a
    string)."""
    shown = frames(error.__traceback__)
    ours = [frame for frame in shown if frame.ours] or shown
    where = f" in {ours[-1].where()}" if ours else ""
    message = error_message(error)
    lines = [f"error: unexpected {type_name(error)}{where}" + (f": {message}" if message else "")]
    lines += [f"  at {frame.where()}" for frame in shown[-SHORT_FRAMES:]]
    lines.append(f"full traceback: {log}" if isinstance(log, Path) else f"full traceback not written: {log}")
    return lines


def expected_message(error: BaseException) -> str:
    """What the one-line ``error:`` of an expected error (a ValueError a user's input caused) prints: the message
    in full when fedpub's own code raised it (fedpub's messages name fields, types and sizes, never values), else,
    raised inside a library (numpy, torch, pyarrow: its message may quote the values), through
    :func:`safe_message`."""
    shown = frames(error.__traceback__)
    if not shown or shown[-1].ours:
        return str(error)
    return error_message(error)


def report_unexpected(error: BaseException) -> list[str]:
    """Write the full traceback of ``error`` (:func:`write_full_report`) and return its :func:`short_report`."""
    try:
        log: Path | str = write_full_report(error)
    except OSError as problem:
        log = f"{problem.strerror or type_name(problem)}" + (f" ({problem.filename})" if problem.filename else "")
    except RuntimeError as problem:  # Path.home(): no home folder
        log = str(problem)
    return short_report(error, log)
