"""From the releases of one round to the dp-accounting ``DpEvent`` of that round (user-level DP).

A round of DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent language
models") samples a cohort of users, clips each user's update to L2 norm C and releases the sum plus
Gaussian noise of std z*C. The privacy unit is one user, so the round is a sampled Gaussian
mechanism, described here with the events of Google's ``dp_accounting`` library:

* Poisson sampling (rate q), add/remove-one neighbours: ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``.
* Fixed-size sampling without replacement (m of N), replace-one neighbours:
  ``SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z / 2))``: replacing a user moves a
  C-clipped sum by 2C, and the RDP accountant reads z as std / (replace-one sensitivity).

Events are also converted to and from plain JSON-ready dicts (ledgers, checkpoints).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import dp_accounting
from dp_accounting import dp_event

from fedpub.privacy.errors import PrivacyError


@dataclass(frozen=True)
class PoissonSampling:
    """Every private user joins each round independently with probability ``sampling_rate``."""

    sampling_rate: float

    def __post_init__(self) -> None:
        q = self.sampling_rate
        if isinstance(q, bool) or not isinstance(q, Real) or not 0.0 < q <= 1.0:
            raise PrivacyError(f"sampling_rate must be a number in (0, 1], got {q!r}")
        object.__setattr__(self, "sampling_rate", float(q))


@dataclass(frozen=True)
class FixedSizeSampling:
    """Each round draws exactly ``cohort_size`` of the ``population`` private users without replacement."""

    population: int
    cohort_size: int

    def __post_init__(self) -> None:
        for name in ("population", "cohort_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                raise PrivacyError(f"{name} must be an integer >= 1, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.cohort_size > self.population:
            raise PrivacyError(
                f"cohort_size must be at most population ({self.population}), got {self.cohort_size}"
            )


Sampling = PoissonSampling | FixedSizeSampling


def neighboring_relation(sampling: Sampling) -> dp_accounting.NeighboringRelation:
    """The neighbouring relation the sampling scheme is accounted under."""
    if isinstance(sampling, PoissonSampling):
        return dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if isinstance(sampling, FixedSizeSampling):
        return dp_accounting.NeighboringRelation.REPLACE_ONE
    raise PrivacyError(
        f"sampling must be PoissonSampling or FixedSizeSampling, got {type(sampling).__name__}"
    )


def round_event(sampling: Sampling, mechanism_events: Sequence[dp_event.DpEvent]) -> dp_event.DpEvent:
    """The DP event of one round whose server steps emitted ``mechanism_events``.

    Each ``GaussianDpEvent(z)`` is a release of L2 sensitivity C (add/remove one user) with noise
    std z*C; ``NoOpDpEvent`` releases nothing. The Gaussians all read the same cohort, so together
    they are one Gaussian with z_eff = (sum z_i^-2)^(-1/2). A round with nothing private released is
    a ``NoOpDpEvent``; a release without noise (z = 0) makes the round ``NonPrivateDpEvent``.
    """
    neighboring_relation(sampling)  # validates the sampling type
    multipliers = []
    for i, event in enumerate(mechanism_events):
        if isinstance(event, dp_event.NoOpDpEvent):
            continue
        if not isinstance(event, dp_event.GaussianDpEvent):
            raise PrivacyError(
                f"mechanism_events[{i}] is {type(event).__name__}; allowed: GaussianDpEvent, NoOpDpEvent"
            )
        z = event.noise_multiplier
        if not isinstance(z, Real) or math.isnan(z) or z < 0:
            raise PrivacyError(
                f"mechanism_events[{i}].noise_multiplier must be >= 0 (inf for no release), got {z!r}"
            )
        multipliers.append(float(z))
    if any(z == 0.0 for z in multipliers):
        return dp_event.NonPrivateDpEvent()
    finite = [z for z in multipliers if z != math.inf]
    if not finite:
        return dp_event.NoOpDpEvent()
    z_eff = sum(z**-2 for z in finite) ** -0.5
    if isinstance(sampling, PoissonSampling):
        return dp_event.PoissonSampledDpEvent(sampling.sampling_rate, dp_event.GaussianDpEvent(z_eff))
    return dp_event.SampledWithoutReplacementDpEvent(
        sampling.population, sampling.cohort_size, dp_event.GaussianDpEvent(z_eff / 2)
    )


def event_to_dict(event: dp_event.DpEvent) -> dict[str, Any]:
    """A DpEvent as plain nested dicts (``{"type": class name, field: value, ...}``), JSON-ready."""
    if not isinstance(event, dp_event.DpEvent):
        raise PrivacyError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}")
    if type(event).__module__ != dp_event.__name__:
        raise PrivacyError(
            f"event type {type(event).__name__} is not defined in {dp_event.__name__}; cannot serialise it"
        )
    return _plain(event.to_named_tuple())


def _plain(value: Any) -> Any:
    if isinstance(value, dp_event.DpEventNamedTuple):
        fields = value._asdict()
        del fields["module_name"]
        return {"type": fields.pop("class_name"), **{k: _plain(v) for k, v in fields.items()}}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def event_from_dict(data: Mapping[str, Any]) -> dp_event.DpEvent:
    """The DpEvent that :func:`event_to_dict` turned into ``data``."""
    if not isinstance(data, Mapping) or "type" not in data:
        raise PrivacyError(f"an event dict needs a 'type' field, got {data!r}")
    cls = getattr(dp_event, str(data["type"]), None)
    if not (isinstance(cls, type) and issubclass(cls, dp_event.DpEvent)):
        raise PrivacyError(f"type {data['type']!r} is not a DpEvent class of {dp_event.__name__}")
    fields = {k: _from_plain(v) for k, v in data.items() if k != "type"}
    try:
        return cls(**fields)
    except TypeError as err:
        raise PrivacyError(f"fields of {cls.__name__} do not match {sorted(fields)}: {err}") from err


def _from_plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return event_from_dict(value)
    if isinstance(value, list):
        return [_from_plain(v) for v in value]
    return value
