"""Cohort rules and round events: validation, the Gaussian merge rule, other events passed through (or refused
under a relation no accountant composes them in), epoch blocks, and the dict round trip."""

from __future__ import annotations

import json
import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting import rdp
from hypothesis import given
from hypothesis import strategies as st

from fedpub.privacy import (
    EpochBlocks,
    FixedSizeSampling,
    PoissonSampling,
    PrivacyError,
    event_from_dict,
    event_to_dict,
    neighboring_relation,
    round_event,
)

NR = dpa.NeighboringRelation
G = dpa.GaussianDpEvent


@pytest.mark.parametrize("q", [0, -0.1, 1.5, math.nan, True, "0.1", None])
def test_invalid_sampling_rate_names_the_field(q: object) -> None:
    with pytest.raises(PrivacyError, match="sampling_rate"):
        PoissonSampling(q)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("population", "cohort_size", "field"),
    [(0, 1, "population"), (2.5, 1, "population"), (10, 0, "cohort_size"), (10, 11, "cohort_size"),
     (10, True, "cohort_size")],
)
def test_invalid_fixed_size_sampling_names_the_field(
    population: object, cohort_size: object, field: str
) -> None:
    with pytest.raises(PrivacyError, match=field):
        FixedSizeSampling(population, cohort_size)  # type: ignore[arg-type]


def test_sampling_values_are_normalised_to_python_numbers() -> None:
    fixed = FixedSizeSampling(np.int64(100), np.int32(10))
    assert type(fixed.population) is int and type(fixed.cohort_size) is int
    assert type(PoissonSampling(np.float32(0.5)).sampling_rate) is float
    assert PoissonSampling(1).sampling_rate == 1.0  # full participation is allowed


def test_neighboring_relation() -> None:
    assert neighboring_relation(PoissonSampling(0.1)) == NR.ADD_OR_REMOVE_ONE
    assert neighboring_relation(FixedSizeSampling(100, 10)) == NR.REPLACE_ONE
    assert neighboring_relation(EpochBlocks(100, 10)) == NR.REPLACE_SPECIAL
    with pytest.raises(PrivacyError, match="sampling"):
        neighboring_relation(0.1)  # type: ignore[arg-type]


def test_poisson_round_is_a_poisson_sampled_gaussian() -> None:
    assert round_event(PoissonSampling(0.01), [G(1.1)], 0) == dpa.PoissonSampledDpEvent(0.01, G(1.1))


def test_fixed_size_round_halves_the_multiplier() -> None:
    # A swap moves a C-clipped sum by 2C; RDP REPLACE_ONE reads z as std / sensitivity.
    expected = dpa.SampledWithoutReplacementDpEvent(3400, 100, G(0.5))
    assert round_event(FixedSizeSampling(3400, 100), [G(1.0)], 0) == expected


def test_gaussians_on_one_cohort_merge_into_one() -> None:
    event = round_event(PoissonSampling(0.05), [G(1.0), dpa.NoOpDpEvent(), G(5.0)], 0)
    z_eff = event.event.noise_multiplier
    assert z_eff == pytest.approx((1.0**-2 + 5.0**-2) ** -0.5, rel=1e-12)
    # accounting.md §4e: RDP treats the nested composition as one Gaussian of z_eff.
    nested = dpa.PoissonSampledDpEvent(0.05, dpa.ComposedDpEvent([G(1.0), G(5.0)]))
    eps_nested = rdp.RdpAccountant().compose(nested, 100).get_epsilon(1e-5)
    eps_merged = rdp.RdpAccountant().compose(event, 100).get_epsilon(1e-5)
    assert eps_merged == pytest.approx(eps_nested, rel=1e-9)
    assert eps_merged == pytest.approx(4.21206, rel=1e-5)


@pytest.mark.parametrize("sampling", [PoissonSampling(0.1), FixedSizeSampling(50, 5)])
def test_degenerate_rounds(sampling: PoissonSampling | FixedSizeSampling) -> None:
    assert round_event(sampling, [], 0) == dpa.NoOpDpEvent()
    assert round_event(sampling, [G(math.inf), dpa.NoOpDpEvent()], 0) == dpa.NoOpDpEvent()
    assert round_event(sampling, [G(1.0), G(0.0)], 0) == dpa.NonPrivateDpEvent()
    assert round_event(sampling, [G(math.inf), G(2.0)], 0) == round_event(sampling, [G(2.0)], 0)


@pytest.mark.parametrize("z", [-1.0, math.nan])
def test_invalid_noise_multiplier_names_the_field(z: float) -> None:
    with pytest.raises(PrivacyError, match=r"mechanism_events\[1\].noise_multiplier"):
        round_event(PoissonSampling(0.1), [G(1.0), G(z)], 0)


TREE = dpa.SingleEpochTreeAggregationDpEvent(1.5, 8)


def test_other_events_pass_through_after_the_sampled_gaussian() -> None:
    blocks = EpochBlocks(100, 10)
    assert round_event(blocks, [TREE, dpa.NoOpDpEvent()], 0) == TREE
    assert round_event(blocks, [G(2.0), TREE], 0) == dpa.ComposedDpEvent([G(2.0), TREE])  # not amplified
    poisson = round_event(PoissonSampling(0.1), [dpa.LaplaceDpEvent(1.0), G(1.0)], 0)
    assert poisson == dpa.ComposedDpEvent([dpa.PoissonSampledDpEvent(0.1, G(1.0)), dpa.LaplaceDpEvent(1.0)])
    assert round_event(blocks, [TREE, dpa.NonPrivateDpEvent()], 0) == dpa.NonPrivateDpEvent()


@pytest.mark.parametrize("sampling", [PoissonSampling(0.1), FixedSizeSampling(100, 10)])
def test_an_event_no_accountant_composes_under_the_cohort_rules_relation_is_refused(sampling) -> None:
    """Tree aggregation is accounted under REPLACE_SPECIAL only: with a sampled cohort the mix has no
    neighbouring relation the accountant composes both under."""
    with pytest.raises(PrivacyError, match=rf"mechanism_events\[1\] is SingleEpochTreeAggregationDpEvent.*"
                                           rf"{sampling.neighboring_relation.name}"):
        round_event(sampling, [G(1.0), TREE], 0)
    with pytest.raises(PrivacyError, match="sampling"):
        round_event("poisson", [G(1.0)], 0)  # type: ignore[arg-type]


def test_epoch_blocks_cover_every_user_exactly_once_an_epoch() -> None:
    ids = [f"u{i:03d}" for i in range(103)]
    blocks = EpochBlocks(103, 10)  # 10 blocks of 10 or 11 users
    assert blocks.rounds_per_epoch == 10 and blocks.expected_cohort(103) == pytest.approx(10.3)
    epochs = []
    for epoch in range(3):
        cohorts = [blocks.draw(ids, 7, epoch * 10 + b) for b in range(10)]
        assert sorted(u for c in cohorts for u in c) == ids
        assert {len(c) for c in cohorts} == {10, 11}
        epochs.append(cohorts)
    assert epochs[0] != epochs[1] != epochs[2]  # a fresh permutation each epoch
    assert blocks.draw(ids, 7, 13) == epochs[1][3] and blocks.draw(ids, 8, 13) != epochs[1][3]
    assert blocks.neighboring_relation == NR.REPLACE_SPECIAL
    with pytest.raises(ValueError, match="103 users, got 102"):
        blocks.draw(ids[:-1], 7, 0)


@pytest.mark.parametrize(("population", "block_size", "field"), [(0, 1, "population"), (10, 11, "block_size"),
                                                                 (10, 2.0, "block_size")])
def test_invalid_epoch_blocks_name_the_field(population: object, block_size: object, field: str) -> None:
    with pytest.raises(PrivacyError, match=field):
        EpochBlocks(population, block_size)  # type: ignore[arg-type]


EVENTS = [
    dpa.NoOpDpEvent(),
    dpa.NonPrivateDpEvent(),
    G(math.inf),
    dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1 + 0.2, G(1 / 3)), 7),
    dpa.ComposedDpEvent([
        dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.05, G(0.6)), 10),
        dpa.SampledWithoutReplacementDpEvent(3400, 100, G(0.5)),
        dpa.ComposedDpEvent([G(2.0), dpa.LaplaceDpEvent(0.5)]),
    ]),
]


@pytest.mark.parametrize("event", EVENTS)
def test_event_dict_round_trip_through_json(event: dpa.DpEvent) -> None:
    data = event_to_dict(event)
    assert event_from_dict(json.loads(json.dumps(data))) == event


def test_event_dict_is_plain_and_named() -> None:
    data = event_to_dict(dpa.PoissonSampledDpEvent(0.01, G(1.1)))
    assert data == {"type": "PoissonSampledDpEvent", "sampling_probability": 0.01,
                    "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.1}}


@given(q=st.floats(1e-9, 1.0), z=st.floats(1e-6, 1e6), count=st.integers(1, 10**9))
def test_event_dict_round_trip_is_exact(q: float, z: float, count: int) -> None:
    event = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, G(z)), count)
    assert event_from_dict(json.loads(json.dumps(event_to_dict(event)))) == event


def test_bad_event_dicts() -> None:
    with pytest.raises(PrivacyError, match="'type'"):
        event_from_dict({"noise_multiplier": 1.0})
    with pytest.raises(PrivacyError, match="NotAnEvent"):
        event_from_dict({"type": "NotAnEvent"})
    with pytest.raises(PrivacyError, match="GaussianDpEvent"):
        event_from_dict({"type": "GaussianDpEvent", "sigma": 1.0})
    with pytest.raises(PrivacyError, match="DpEvent"):
        event_to_dict("GaussianDpEvent")  # type: ignore[arg-type]
