"""Generated look-alike data is never replaced under a run's feet.

A look-alike dataset (a ``data.source`` that generates its files) is generated into ``data.path`` the first
time a config asks for it and reused while the spec is the same. A config with another spec for the same folder is
refused, naming the fields that differ: regenerating in place would change the data of a run that is reading it (or
will resume on it), and files fedpub did not write there (a real TFF download) are never overwritten.
"""

from __future__ import annotations

import json
from pathlib import Path

from fedpub.data.base import DatasetError


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
