"""Generated look-alike data is never replaced under a run's feet.

A look-alike dataset (a ``data.source`` that generates its files) is generated into ``data.path`` the first
time a config asks for it and reused while the spec is the same. A config with another spec for the same folder is
refused, naming the fields that differ: regenerating in place would change the data of a run that is reading it (or
will resume on it), and files fedpub did not write there (a real TFF download) are never overwritten. Runs started
at once on the same folder (``--jobs``) generate it once: :func:`generation_lock` makes the others wait, then reuse it.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py

from fedpub.data.base import DatasetError

GENERATION_LOCK = ".fedpub_generating.lock"
"""The lock file :func:`generation_lock` holds in a look-alike's folder."""
SPEC_ATTR = "fedpub_spec"
"""The attribute of a generated HDF5 file that holds the spec it was generated from (JSON)."""


@contextmanager
def generation_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive OS lock (``fcntl.flock``, waited for) on ``directory``'s :data:`GENERATION_LOCK` while
    checking and generating look-alike files there: of several processes asking for the same folder at once, one
    generates and the others, once it is done, find the files and reuse them (without it two generated at once and
    one removed the other's progress marker under it)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / GENERATION_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def spec_differences(found: str, wanted: str) -> list[str]:
    """``field: found → wanted`` for every top-level field of two JSON specs that differs."""
    old, new = json.loads(found), json.loads(wanted)
    return [f"{k}: {old.get(k)!r} → {new.get(k)!r}" for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)]


def refuse_other_spec(directory: Path, what: str, found: str | None, wanted: str) -> None:
    """Raise DatasetError when ``directory`` holds ``what`` that fedpub did not generate from ``wanted``: generated
    from another spec (``found``, the differing fields named), or not by fedpub at all (``found`` is None)."""
    remedy = f"set data.path to another folder, or delete {directory} to generate it anew"
    if found is None:
        raise DatasetError(f"{directory} holds {what} files that fedpub did not generate; {remedy}")
    if found != wanted:
        differences = "; ".join(spec_differences(found, wanted))
        raise DatasetError(f"{directory} holds {what} generated from another spec ({differences}); {remedy}")


def stored_spec(path: Path) -> str | None:
    """The spec a generated HDF5 file stores in its :data:`SPEC_ATTR` attribute (None: none, or not HDF5)."""
    try:
        with h5py.File(path, "r") as f:
            value = f.attrs.get(SPEC_ATTR)
    except OSError:
        return None
    return value.decode() if isinstance(value, bytes) else value


def ensure_generated(
    directory: Path, what: str, paths: tuple[Path, ...], wanted: str, write: Callable[[], tuple[Path, ...]]
) -> tuple[Path, ...]:
    """The HDF5 files ``paths`` of ``what`` in ``directory``: written by ``write`` when absent, reused when generated
    from the spec ``wanted``, refused (:func:`refuse_other_spec`) when generated from another or not by fedpub;
    under :func:`generation_lock`."""
    with generation_lock(directory):
        for path in paths:
            if path.is_file():
                refuse_other_spec(directory, what, stored_spec(path), wanted)
        if all(p.is_file() for p in paths):
            return paths
        return write()
