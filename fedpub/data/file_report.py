"""What a dataset file holds and what is wrong with it, as ``fedpub data info|verify`` prints it; and how a dataset
declares the describers of its own files (:attr:`fedpub.data.spec.Dataset.describers`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np


@dataclass
class FileReport:
    """What one file holds (``facts``, label/value pairs) and what is wrong with it (``problems``)."""

    path: Path
    layout: str = "unknown"
    facts: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, label: str, value: object) -> None:
        self.facts.append((label, str(value)))


Describer = Callable[[Path, FileReport, bool], None]
"""Fills in a report of one file; ``deep`` (verify) reads more than ``info`` does. Raises DatasetError, OSError or
sqlite3.Error for a file it cannot read (the caller turns that into a problem)."""


class SplitReader(Protocol):
    """What ``verify`` needs of a reader of one split of a TFF SQLite database: its clients and their counts
    (from ``client_metadata``, checked when it is opened), and a client's rows decoded with the reader's checks."""

    client_ids: list[str]

    def num_examples(self, client_id: str) -> int: ...

    def decode_rows(self, client_id: str, blobs: Sequence[object]) -> object: ...

    def close(self) -> None: ...


def _no_side_files(path: Path) -> Describer | None:
    return None


def _no_missing_splits(names: set[str]) -> list[str]:
    return []


@dataclass(frozen=True)
class FileDescribers:
    """How ``fedpub data info|verify`` describes a dataset's files."""

    label: str
    """The dataset as a report's layout names it (``<label>, TFF HDF5``)."""
    hdf5: Describer
    """One of its TFF HDF5 files (clients, examples, its own checks; ``deep``: every client read as a run reads it)."""
    sqlite_reader: Callable[[Path, str], SplitReader] | None = None
    """The reader of one split of its SQLite database (``verify`` decodes every row with it); None without one."""
    sqlite_split_note: Callable[[str], str] = lambda split: ""
    """What a split of its SQLite database adds to the split's line (e.g. the class count), or ``""``."""
    missing_sqlite_splits: Callable[[set[str]], list[str]] = _no_missing_splits
    """The splits a run reads beside those a database holds (``names``), which it lacks."""
    side_file: Callable[[Path], Describer | None] = _no_side_files
    """The describer of one of its other files (a vocabulary, recognised by name or content), or None."""


def size_text(num_bytes: int) -> str:
    if num_bytes < 1024:
        return f"{num_bytes} B"
    value, unit = num_bytes / 1024, "KiB"
    for larger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.1f} {unit} ({num_bytes} B)"


def spread(counts: list[int]) -> str:
    """Total, and the per-client minimum, median and maximum, of ``counts``."""
    return f"{sum(counts)} (per client min {min(counts)}, median {int(np.median(counts))}, max {max(counts)})"
