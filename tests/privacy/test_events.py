"""Round events: sampling validation, the Gaussian merge rule, and the dict round trip."""

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
    with pytest.raises(PrivacyError, match="sampling"):
        neighboring_relation(0.1)  # type: ignore[arg-type]


def test_poisson_round_is_a_poisson_sampled_gaussian() -> None:
    assert round_event(PoissonSampling(0.01), [G(1.1)]) == dpa.PoissonSampledDpEvent(0.01, G(1.1))


def test_fixed_size_round_halves_the_multiplier() -> None:
    # A swap moves a C-clipped sum by 2C; RDP REPLACE_ONE reads z as std / sensitivity.
    expected = dpa.SampledWithoutReplacementDpEvent(3400, 100, G(0.5))
    assert round_event(FixedSizeSampling(3400, 100), [G(1.0)]) == expected


def test_gaussians_on_one_cohort_merge_into_one() -> None:
    event = round_event(PoissonSampling(0.05), [G(1.0), dpa.NoOpDpEvent(), G(5.0)])
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
    assert round_event(sampling, []) == dpa.NoOpDpEvent()
    assert round_event(sampling, [G(math.inf), dpa.NoOpDpEvent()]) == dpa.NoOpDpEvent()
    assert round_event(sampling, [G(1.0), G(0.0)]) == dpa.NonPrivateDpEvent()
    assert round_event(sampling, [G(math.inf), G(2.0)]) == round_event(sampling, [G(2.0)])


@pytest.mark.parametrize("z", [-1.0, math.nan])
def test_invalid_noise_multiplier_names_the_field(z: float) -> None:
    with pytest.raises(PrivacyError, match=r"mechanism_events\[1\].noise_multiplier"):
        round_event(PoissonSampling(0.1), [G(1.0), G(z)])


def test_other_mechanism_events_are_rejected_by_name() -> None:
    with pytest.raises(PrivacyError, match="LaplaceDpEvent"):
        round_event(PoissonSampling(0.1), [dpa.LaplaceDpEvent(1.0)])
    with pytest.raises(PrivacyError, match="sampling"):
        round_event("poisson", [G(1.0)])  # type: ignore[arg-type]


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
