"""Noise calibration pinned to accounting.md §4c, over planned runs (boosted rounds, tree aggregation), and its
on-disk cache keyed by the planned event."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import dp_accounting
import dp_accounting.pld
import dp_accounting.rdp
import pytest

import fedpub
from fedpub.privacy import (
    FixedSizeSampling,
    PoissonSampling,
    PrivacyError,
    calibrate,
    calibrate_noise_multiplier,
    epsilon_for,
    event_from_dict,
    round_event,
)
from fedpub.privacy.calibration import CACHE_FILE, KEY_PROBES

DELTA = 1e-5
G = dp_accounting.GaussianDpEvent
ADD_OR_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE_SPECIAL = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
DOPE = PoissonSampling(100 / 68_600)  # EMNIST, 2% public writers, m=100
FULL = PoissonSampling(1.0)  # full participation: cheap to account, for the cache tests


@pytest.mark.parametrize(
    ("sampling", "accountant", "expected"),
    [(DOPE, "rdp", 0.8882), (DOPE, "pld", 0.6978), (FixedSizeSampling(68_600, 100), "rdp", 1.8634)],
)
def test_reproduces_dope_table(sampling, accountant: str, expected: float, tmp_path: Path) -> None:
    z = calibrate_noise_multiplier(1.0, DELTA, sampling, 1500, accountant, cache_dir=tmp_path)
    assert z == pytest.approx(expected, abs=1e-4)
    assert epsilon_for(sampling, z, 1500, DELTA, accountant) <= 1.0
    assert epsilon_for(sampling, z * 0.99, 1500, DELTA, accountant) > 1.0


def test_second_call_hits_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sampling = FULL
    z = calibrate_noise_multiplier(2.0, DELTA, sampling, 50, "rdp", cache_dir=tmp_path)
    entries = json.loads((tmp_path / CACHE_FILE).read_text())
    assert list(entries.values()) == [z]
    key = json.loads(next(iter(entries)))
    assert key["accountant"] == "rdp" and key["target_epsilon"] == 2.0
    assert key["neighboring_relation"] == "ADD_OR_REMOVE_ONE"
    assert [event_from_dict(e) for e in key["planned"]] == [
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(1.0, G(z)), 50) for z in KEY_PROBES
    ]

    def forbidden(*args: object, **kwargs: object) -> float:
        raise AssertionError("dp_accounting was called although the result is cached")

    monkeypatch.setattr(dp_accounting, "calibrate_dp_mechanism", forbidden)
    assert calibrate_noise_multiplier(2.0, DELTA, sampling, 50, "rdp", cache_dir=tmp_path) == z
    with pytest.raises(AssertionError, match="cached"):  # any other input is a miss
        calibrate_noise_multiplier(2.0, DELTA, sampling, 51, "rdp", cache_dir=tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name != CACHE_FILE]  # no temporary files left


def test_cache_keeps_every_entry(tmp_path: Path) -> None:
    z_rdp = calibrate_noise_multiplier(4.0, DELTA, FULL, 20, "rdp", cache_dir=tmp_path)
    z_rdp_1e6 = calibrate_noise_multiplier(4.0, 1e-6, FULL, 20, "rdp", cache_dir=tmp_path)
    assert z_rdp_1e6 > z_rdp
    assert sorted(json.loads((tmp_path / CACHE_FILE).read_text()).values()) == [z_rdp, z_rdp_1e6]


def test_corrupt_cache_is_ignored_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / CACHE_FILE).write_text("{not json")
    with pytest.warns(UserWarning, match="calibration cache"):
        z = calibrate_noise_multiplier(3.0, DELTA, FULL, 10, "rdp", cache_dir=tmp_path)
    assert list(json.loads((tmp_path / CACHE_FILE).read_text()).values()) == [z]


@pytest.mark.parametrize(
    ("edit", "warning"), [(0.05, "spends epsilon=.* > target_epsilon=2"), ("0.9", "not a noise multiplier")]
)
def test_an_edited_cache_entry_is_recomputed_with_a_warning(edit: object, warning: str, tmp_path: Path) -> None:
    z = calibrate_noise_multiplier(2.0, DELTA, FULL, 50, "rdp", cache_dir=tmp_path)
    (key,) = json.loads((tmp_path / CACHE_FILE).read_text())
    assert json.loads(key)["fedpub"] == fedpub.__version__
    (tmp_path / CACHE_FILE).write_text(json.dumps({key: edit}))  # an entry edited by hand (or another program)
    named = re.escape(f"calibration cache {tmp_path / CACHE_FILE}: its entry for this plan")
    with pytest.warns(UserWarning, match=f"{named}.*{warning}"):
        assert calibrate_noise_multiplier(2.0, DELTA, FULL, 50, "rdp", cache_dir=tmp_path) == z
    assert json.loads((tmp_path / CACHE_FILE).read_text()) == {key: z}  # rewritten


def test_default_cache_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDPUB_CACHE_DIR", str(tmp_path / "cache"))
    z = calibrate_noise_multiplier(3.0, DELTA, FULL, 10, "rdp")
    assert list(json.loads((tmp_path / "cache" / CACHE_FILE).read_text()).values()) == [z]


def test_unreachable_targets(tmp_path: Path) -> None:
    with pytest.raises(PrivacyError, match="so weak"):
        calibrate_noise_multiplier(1e4, DELTA, PoissonSampling(0.5), 1, "pld", cache_dir=tmp_path)
    with pytest.raises(PrivacyError, match="rdp"):  # fixed-size sampling has no PLD accounting
        calibrate_noise_multiplier(1.0, DELTA, FixedSizeSampling(100, 10), 10, "pld", cache_dir=tmp_path)
    assert not (tmp_path / CACHE_FILE).exists()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"target_epsilon": 0.0}, "epsilon"), ({"delta": 1.0}, "delta"), ({"rounds": 0}, "rounds"),
     ({"accountant": "prv"}, "accountant"), ({"sampling": 0.1}, "sampling")],
)
def test_invalid_inputs_name_the_field(kwargs: dict, field: str, tmp_path: Path) -> None:
    args = {"target_epsilon": 1.0, "delta": DELTA, "sampling": PoissonSampling(0.1), "rounds": 10,
            "accountant": "rdp", "cache_dir": tmp_path, **kwargs}
    with pytest.raises(PrivacyError, match=field):
        calibrate_noise_multiplier(**args)


def _direct_epsilon(accountant: str, q: float, boosted: tuple[int, float], z: float, rounds: int) -> float:
    """ε of the boosted schedule composed through dp_accounting directly."""
    if accountant == "pld":
        acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    else:
        acc = dp_accounting.rdp.RdpAccountant()
    k, z_b = boosted
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, G(z)), rounds - k)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, G(z_b)), k)
    return acc.get_epsilon(DELTA)


def _boosted_plan(rounds: int, k: int, boosted_z) -> Callable[[float], dp_accounting.DpEvent]:
    """k rounds at ``boosted_z(z)``, then rounds − k at z, with full participation."""
    def planned(z: float) -> dp_accounting.DpEvent:
        return dp_accounting.ComposedDpEvent([
            dp_accounting.SelfComposedDpEvent(round_event(FULL, [G(boosted_z(z))], 0), k),
            dp_accounting.SelfComposedDpEvent(round_event(FULL, [G(z)], 0), rounds - k),
        ])
    return planned


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_a_plan_with_rounds_at_a_fixed_z_is_calibrated_to_the_target(accountant: str, tmp_path: Path) -> None:
    rounds, boosted = 10, (2, 2.5)  # the plain z is about 3.4 (PLD) and 3.7 (RDP)
    z = calibrate(_boosted_plan(rounds, 2, lambda _: 2.5), ADD_OR_REMOVE, 4.0, DELTA, accountant, tmp_path)
    epsilon = _direct_epsilon(accountant, 1.0, boosted, z, rounds)
    assert 4.0 - 1e-3 <= epsilon <= 4.0
    plain = calibrate_noise_multiplier(4.0, DELTA, FULL, rounds, accountant, cache_dir=tmp_path)
    assert z > plain
    assert len(json.loads((tmp_path / CACHE_FILE).read_text())) == 2


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_rounds_at_a_ratio_of_z_have_their_own_cache_entry(accountant: str, tmp_path: Path) -> None:
    """At z = 1 the ratio 0.5 and the fixed z_b = 0.5 plan the same event: the key tells them apart."""
    rounds = 10
    z = calibrate(_boosted_plan(rounds, 2, lambda z: 0.5 * z), ADD_OR_REMOVE, 4.0, DELTA, accountant, tmp_path)
    assert 4.0 - 1e-3 <= _direct_epsilon(accountant, 1.0, (2, 0.5 * z), z, rounds) <= 4.0
    with pytest.raises(PrivacyError, match="alone already spend"):  # not the ratio plan's cached z
        calibrate(_boosted_plan(rounds, 2, lambda _: 0.5), ADD_OR_REMOVE, 4.0, DELTA, accountant, tmp_path)


def test_a_plan_that_rdp_overstates_is_calibrated_with_pld(tmp_path: Path) -> None:
    # one Gaussian at z_b = 2 costs 1.99 under PLD but 2.17 under RDP: the target 2.1 is out of RDP's reach
    plan = _boosted_plan(5, 1, lambda _: 2.0)
    z = calibrate(plan, ADD_OR_REMOVE, 2.1, DELTA, "pld", tmp_path)
    assert 2.1 - 1e-3 <= _direct_epsilon("pld", 1.0, (1, 2.0), z, 5) <= 2.1
    with pytest.raises(PrivacyError, match="spends epsilon=2.16.*alone already spend it"):
        calibrate(plan, ADD_OR_REMOVE, 2.1, DELTA, "rdp", tmp_path)


def test_tree_aggregation_is_calibrated_with_rdp_and_refused_by_pld(tmp_path: Path) -> None:
    """DP-FTRL's plan: 3 epochs of a 16-round tree under REPLACE_SPECIAL; RDP of one tree is α·d/(2z²) with
    d = ⌈log2(17)⌉ = 5, so 3 trees are one Gaussian of z/sqrt(15) (checked against that)."""
    def planned(z: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(dp_accounting.SingleEpochTreeAggregationDpEvent(z, 16), 3)

    z = calibrate(planned, REPLACE_SPECIAL, 2.0, DELTA, "rdp", tmp_path)
    gaussian = dp_accounting.rdp.RdpAccountant().compose(G(z / 15**0.5)).get_epsilon(DELTA)
    assert 2.0 - 1e-3 <= gaussian <= 2.0
    with pytest.raises(PrivacyError, match="accounted only by accountant='rdp'"):
        calibrate(planned, REPLACE_SPECIAL, 2.0, DELTA, "pld", tmp_path)
