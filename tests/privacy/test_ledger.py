"""The privacy ledger: anyone can rebuild the composed event from the file and recompute epsilon."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import dp_accounting as dpa
import pytest
from dp_accounting import pld, rdp

from fedpub.privacy import (
    FixedSizeSampling,
    PoissonSampling,
    PrivacyError,
    UserLevelAccountant,
    ledger_record,
    read_ledger_event,
    round_event,
    write_ledger,
)

NR = dpa.NeighboringRelation
G = dpa.GaussianDpEvent
DELTA = 1e-5


def test_pld_ledger_recomputes_independently(tmp_path: Path) -> None:
    accountant = UserLevelAccountant("pld")
    sampling = PoissonSampling(0.05)
    for t in range(30):
        accountant.compose(round_event(sampling, [G(0.8 if t < 5 else 1.2)], t))
    path = tmp_path / "run" / "ledger.json"
    write_ledger(path, accountant, DELTA)

    record = json.loads(path.read_text())
    assert record["rounds"] == 30 and record["delta"] == DELTA
    assert record["accountant"] == "pld" and record["neighboring_relation"] == "ADD_OR_REMOVE_ONE"
    assert record["dp_accounting_version"] == importlib.metadata.version("dp-accounting")
    assert record["epsilon"] == accountant.epsilon(DELTA)
    assert record["event"]["type"] == "ComposedDpEvent" and len(record["event"]["events"]) == 2

    event = read_ledger_event(path)
    assert event == accountant.ledger
    fresh_pld = pld.PLDAccountant(
        NR[record["neighboring_relation"]], value_discretization_interval=record["pld_discretization"]
    )
    recomputed = fresh_pld.compose(event).get_epsilon(record["delta"])
    assert recomputed == pytest.approx(record["epsilon"], rel=1e-6)  # composition.py: reused curves
    assert rdp.RdpAccountant().compose(event).get_epsilon(DELTA) == pytest.approx(
        record["cross_check"]["rdp"], rel=1e-12)
    assert set(record["cross_check"]) == {"rdp"}
    assert [p.name for p in path.parent.iterdir()] == ["ledger.json"]  # no temporary file left


def test_fixed_size_ledger_has_no_pld_cross_check(tmp_path: Path) -> None:
    accountant = UserLevelAccountant("rdp", NR.REPLACE_ONE)
    accountant.compose(round_event(FixedSizeSampling(3400, 100), [G(1.0)], 0), 1500)
    record = ledger_record(accountant, DELTA)
    assert record["epsilon"] == pytest.approx(145.519, rel=1e-5)
    assert record["neighboring_relation"] == "REPLACE_ONE" and record["cross_check"] == {}

    path = tmp_path / "ledger.json"
    path.write_text("old")
    write_ledger(path, accountant, DELTA)
    event = read_ledger_event(path)
    fresh_rdp = rdp.RdpAccountant(neighboring_relation=NR.REPLACE_ONE)
    assert fresh_rdp.compose(event).get_epsilon(DELTA) == pytest.approx(record["epsilon"], rel=1e-12)


def test_empty_and_rdp_ledgers(tmp_path: Path) -> None:
    record = ledger_record(UserLevelAccountant(), DELTA)
    assert record["event"] == {"type": "NoOpDpEvent"} and record["epsilon"] == 0.0
    assert record["cross_check"] == {"rdp": 0.0}
    accountant = UserLevelAccountant("rdp")
    accountant.compose(round_event(PoissonSampling(0.01), [G(1.1)], 0), 1000)
    record = ledger_record(accountant, DELTA)
    assert record["epsilon"] == pytest.approx(1.7118, rel=1e-4)
    assert record["cross_check"]["pld"] == pytest.approx(1.5154, rel=1e-3)


def test_reading_something_else_fails_clearly(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"round": 3}))
    with pytest.raises(PrivacyError, match="event"):
        read_ledger_event(path)
