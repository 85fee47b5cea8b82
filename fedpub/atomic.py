"""Atomic file writes: readers see the old file or the new one, never a partial write."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path``; it replaces ``path`` only if the block finishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = ""
    try:  # from the file's creation on: an interrupt between it and the write must not leave it behind
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be read by others
        yield Path(tmp)
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())  # on disk before the rename: a power cut leaves the old file or the new one
        os.replace(tmp, path)
    finally:
        if tmp:
            Path(tmp).unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")
