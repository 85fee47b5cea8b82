"""Generated look-alike data is never replaced under a run's feet.

A look-alike dataset (a ``data.source`` that generates its files) is generated into ``data.path`` the first
time a config asks for it and reused while the spec is the same. A config with another spec for the same folder is
refused, naming the fields that differ: regenerating in place would change the data of a run that is reading it (or
will resume on it), and files fedpub did not write there (a real TFF download) are never overwritten.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import h5py

from fedpub.data.base import DatasetError

SPEC_ATTR = "fedpub_spec"
"""The attribute of a generated HDF5 file that holds the spec it was generated from (JSON)."""


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
    from the spec ``wanted``, refused (:func:`refuse_other_spec`) when generated from another or not by fedpub."""
    for path in paths:
        if path.is_file():
            refuse_other_spec(directory, what, stored_spec(path), wanted)
    if all(p.is_file() for p in paths):
        return paths
    return write()
