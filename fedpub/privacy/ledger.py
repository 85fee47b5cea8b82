"""The privacy ledger of a run: its composed DpEvent as JSON, so anyone can recompute epsilon.

The record holds the event (plain nested dicts, see ``events.event_to_dict``), the number of rounds,
delta, the neighbouring relation, epsilon from the accountant in use, the other dp-accounting
accountant's epsilon where it supports the event, and the dp-accounting version (user-level
DP-FedAvg accounting as in McMahan et al. 2018).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from dp_accounting import dp_event

from fedpub.privacy.accountant import UserLevelAccountant, cross_check
from fedpub.privacy.errors import PrivacyError
from fedpub.privacy.events import event_from_dict, event_to_dict

LEDGER_FORMAT = "fedpub.privacy.ledger/1"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and ``os.replace``: readers see the
    old file or the new one, never a partial write."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a ledger is meant to be read by others
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def ledger_record(accountant: UserLevelAccountant, delta: float) -> dict[str, Any]:
    """The ledger of everything ``accountant`` composed, with epsilon at ``delta``."""
    other = "rdp" if accountant.accountant == "pld" else "pld"
    ledger = accountant.ledger
    return {
        "format": LEDGER_FORMAT,
        "event": event_to_dict(ledger),
        "rounds": accountant.rounds,
        "delta": delta,
        "neighboring_relation": accountant.neighboring_relation.name,
        "accountant": accountant.accountant,
        "pld_discretization": accountant.pld_discretization,
        "epsilon": accountant.epsilon(delta),
        "cross_check": cross_check(
            ledger, delta, accountant.neighboring_relation, accountant.pld_discretization, accountants=[other]
        ),
        "dp_accounting_version": importlib.metadata.version("dp-accounting"),
    }


def write_ledger(path: Path, accountant: UserLevelAccountant, delta: float) -> None:
    """Write :func:`ledger_record` to ``path`` atomically."""
    write_json_atomic(path, ledger_record(accountant, delta))


def read_ledger_event(path: Path) -> dp_event.DpEvent:
    """The composed DpEvent stored in the ledger file at ``path``."""
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(record, dict) or "event" not in record:
        raise PrivacyError(f"{path} is not a privacy ledger: it has no 'event' field")
    return event_from_dict(record["event"])
