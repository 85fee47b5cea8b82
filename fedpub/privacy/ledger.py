"""The privacy ledger of a run: its composed DpEvent as JSON, so anyone can recompute epsilon.

The record holds the event (plain nested dicts, see ``events.event_to_dict``), the number of rounds,
delta, the neighbouring relation, epsilon from the accountant in use, the other dp-accounting
accountant's epsilon where it supports the event, and the dp-accounting version (user-level
DP-FedAvg accounting as in McMahan et al. 2018).
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

from dp_accounting import dp_event

from fedpub.atomic import write_json_atomic
from fedpub.privacy.accountant import UserLevelAccountant, cross_check
from fedpub.privacy.errors import PrivacyError
from fedpub.privacy.events import event_from_dict, event_to_dict

LEDGER_FORMAT = "fedpub.privacy.ledger/1"


def ledger_record(accountant: UserLevelAccountant, delta: float, *, randomness: str | None = None) -> dict[str, Any]:
    """The ledger of everything ``accountant`` composed, with epsilon at ``delta``; ``randomness`` says where the
    noise and cohorts were drawn from (:meth:`fedpub.privacy.randomness.PrivacyRandomness.statement`), since ε
    holds only against whoever cannot rebuild them."""
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
        **({"randomness": randomness} if randomness is not None else {}),
    }


def write_ledger(path: Path, accountant: UserLevelAccountant, delta: float, *, randomness: str | None = None) -> None:
    """Write :func:`ledger_record` to ``path`` atomically."""
    write_json_atomic(path, ledger_record(accountant, delta, randomness=randomness))


def read_ledger_event(path: Path) -> dp_event.DpEvent:
    """The composed DpEvent stored in the ledger file at ``path``."""
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(record, dict) or "event" not in record:
        raise PrivacyError(f"{path} is not a privacy ledger: it has no 'event' field")
    return event_from_dict(record["event"])
