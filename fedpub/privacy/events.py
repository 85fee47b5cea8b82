"""Cohort rules and the dp-accounting ``DpEvent`` of one round (user-level DP).

A round of DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent language
models") samples a cohort of users, clips each user's update to L2 norm C and releases the sum plus
Gaussian noise of std z*C. The privacy unit is one user. A **cohort rule** says who takes part in each
round and what that means for the accountant: its neighbouring relation, the expected cohort m the noisy
sum is divided by, and how it amplifies a Gaussian release on the cohort:

* Poisson sampling (rate q), add/remove-one neighbours: ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``.
* Fixed-size sampling without replacement (m of N), replace-one neighbours:
  ``SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z / 2))``: replacing a user moves a
  C-clipped sum by 2C, and the RDP accountant reads z as std / (replace-one sensitivity).
* Cyclic Poisson sampling (rate q, k groups; Choquette-Choo, McMahan, Rush and Thakurta 2023, "(Amplified) Banded
  Matrix Factorization: A unified approach to private training", §4), add/remove-one neighbours: the users are
  split into k groups by a keyed hash of the privacy seed and their id, and round t samples Poisson from group
  t mod k only, so a user takes part at most once every k rounds and in at most ⌈T/k⌉ of T rounds. Group 0's rounds
  are the worst case: round t's Gaussian is ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` when t mod k = 0 and
  ``NoOpDpEvent`` otherwise, so a run composes ⌈T/k⌉ sampled Gaussians (every round must release the same z).
* Cyclic fixed-size sampling (m of a group, k groups; the fixed-size form of the above, for transports that need a
  known cohort, SecAgg+), replace-one neighbours: a seeded permutation of the users' positions, drawn once a run,
  deals them into k groups of ⌊N/k⌋ or ⌈N/k⌉, and round t draws m of group t mod k without replacement. The
  partition is uniform and does not read the data, so a replaced user's replacement takes its place in its group;
  given the group, the other groups' rounds do not read either. The accountant prices ⌈T/k⌉ rounds (group 0's, the
  most) of ``SampledWithoutReplacementDpEvent(⌊N/k⌋, m, GaussianDpEvent(z / 2))`` (the smallest group's), an upper
  bound for every group, exact when k divides N; the other rounds are ``NoOpDpEvent``.
* Epoch blocks, no sampling (DP-FTRL: Kairouz et al. 2021, "Practical and Private (Deep) Learning without
  Sampling or Shuffling", §3 and Definition 1.1): each epoch deals the users into fixed blocks, one block a
  round; a user replaced by the special (zero) record moves a C-clipped sum by C, so a Gaussian release is
  ``GaussianDpEvent(z)``, not amplified, under ``REPLACE_SPECIAL`` neighbours.

:func:`round_event` is open: the Gaussian releases of a round (one cohort, one merged Gaussian) are wrapped
with the cohort rule's amplification in that round; any other event a step declares (tree aggregation, ...) is passed
through as it is, after checking that a dp-accounting accountant composes it under the rule's relation.
Events are also converted to and from plain JSON-ready dicts (ledgers, checkpoints), and grouped into
self-compositions (:func:`merged`, :func:`composed`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Protocol, runtime_checkable

import dp_accounting
import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from fedpub.privacy.errors import PrivacyError
from fedpub.seeding import numpy_generator

NeighboringRelation = dp_accounting.NeighboringRelation
Group = tuple[dp_event.DpEvent, int]


@runtime_checkable
class CohortRule(Protocol):
    """Who takes part in each round, and what that means for the accountant."""

    @property
    def neighboring_relation(self) -> NeighboringRelation:
        """The relation under which the rule's rounds are accounted."""
        ...

    def expected_cohort(self, population: int) -> float:
        """m, the expected private cohort of a round: the noisy sum is divided by it, never by the count."""
        ...

    def sampled(self, gaussian: dp_event.GaussianDpEvent, round_index: int) -> dp_event.DpEvent:
        """The event of a Gaussian release (sensitivity C, noise z·C) on round ``round_index``'s cohort."""
        ...

    def draw(self, client_ids: Sequence[str], seed: int, round_index: int) -> list[str]:
        """Round ``round_index``'s cohort (depends only on the seed and the round), in the order of ``client_ids``."""
        ...


def _check_sizes(rule: FixedSizeSampling | EpochBlocks, part: str) -> None:
    """``population`` and ``part`` (the users a round) are integers >= 1, normalised to ``int``; part <= population."""
    for name in ("population", part):
        value = getattr(rule, name)
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            raise PrivacyError(f"{name} must be an integer >= 1, got {value!r}")
        object.__setattr__(rule, name, int(value))
    if getattr(rule, part) > rule.population:
        raise PrivacyError(f"{part} must be at most population ({rule.population}), got {getattr(rule, part)}")


def _check_rate(q: object) -> float:
    """``q`` as a float in (0, 1]."""
    if isinstance(q, bool) or not isinstance(q, Real) or not 0.0 < q <= 1.0:
        raise PrivacyError(f"sampling_rate must be a number in (0, 1], got {q!r}")
    return float(q)


def _check_groups(groups: object) -> int:
    """``groups`` as an int >= 1."""
    if isinstance(groups, bool) or not isinstance(groups, Integral) or groups < 1:
        raise PrivacyError(f"groups must be an integer >= 1, got {groups!r}")
    return int(groups)


def _check_population(rule: FixedSizeSampling | EpochBlocks, client_ids: Sequence[str]) -> None:
    if rule.population != len(client_ids):
        raise ValueError(f"{type(rule).__name__} was set up for {rule.population} users, got {len(client_ids)}")


@dataclass(frozen=True)
class PoissonSampling:
    """Every private user joins each round independently with probability ``sampling_rate`` (what the
    accountant assumes: the cohort size varies round to round; Abadi et al. 2016)."""

    sampling_rate: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampling_rate", _check_rate(self.sampling_rate))

    @property
    def neighboring_relation(self) -> NeighboringRelation:
        return NeighboringRelation.ADD_OR_REMOVE_ONE

    def expected_cohort(self, population: int) -> float:
        return self.sampling_rate * population

    def sampled(self, gaussian: dp_event.GaussianDpEvent, round_index: int) -> dp_event.DpEvent:
        return dp_event.PoissonSampledDpEvent(self.sampling_rate, gaussian)

    def draw(self, client_ids: Sequence[str], seed: int, round_index: int) -> list[str]:
        rng = numpy_generator(seed, round_index, "cohort")
        return [client_ids[i] for i in np.flatnonzero(rng.random(len(client_ids)) < self.sampling_rate)]


@dataclass(frozen=True)
class CyclicPoissonSampling:
    """Cyclic Poisson sampling (Choquette-Choo et al. 2023, §4): the private users are split into ``groups`` k by
    a keyed hash of the privacy seed and the user's id (:func:`cyclic_group`: adding or removing a user moves no
    other), and round t samples each user of group t mod k independently with probability ``sampling_rate`` q.
    A user takes part at most once every k rounds, which banded matrix-factorization noise of at most k bands
    needs. The accountant prices group 0's rounds (⌈T/k⌉ of T, the most of any group): a Gaussian release is
    Poisson-sampled in rounds t ≡ 0 (mod k) and a no-op in the others, which is the worst case only when every
    round releases the same noise multiplier (the strategy's build refuses a schedule that varies it). The
    expected cohort is qN/k. k = 1 is :class:`PoissonSampling`, cohorts and events alike."""

    sampling_rate: float
    groups: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampling_rate", _check_rate(self.sampling_rate))
        object.__setattr__(self, "groups", _check_groups(self.groups))

    @property
    def neighboring_relation(self) -> NeighboringRelation:
        return NeighboringRelation.ADD_OR_REMOVE_ONE

    def expected_cohort(self, population: int) -> float:
        return self.sampling_rate * population / self.groups

    def sampled(self, gaussian: dp_event.GaussianDpEvent, round_index: int) -> dp_event.DpEvent:
        if round_index % self.groups:
            return dp_event.NoOpDpEvent()
        return dp_event.PoissonSampledDpEvent(self.sampling_rate, gaussian)

    def draw(self, client_ids: Sequence[str], seed: int, round_index: int) -> list[str]:
        group = round_index % self.groups
        rng = numpy_generator(seed, round_index, "cohort")
        joins = rng.random(len(client_ids)) < self.sampling_rate
        return [user for user, joined in zip(client_ids, joins, strict=True)
                if joined and cyclic_group(user, seed, self.groups) == group]


def cyclic_group(user_id: str, seed: int, groups: int) -> int:
    """The group of ``user_id`` among ``groups`` under the privacy ``seed``: BLAKE2b keyed with the seed (secret
    with a secret seed), so a user's group depends on nothing but its id."""
    key = int(seed).to_bytes(8, "little", signed=True)
    digest = hashlib.blake2b(str(user_id).encode(), key=key, digest_size=8, person=b"fedpub-cyclic").digest()
    return int.from_bytes(digest, "little") % groups


@dataclass(frozen=True)
class FixedSizeSampling:
    """Each round draws exactly ``cohort_size`` of the ``population`` private users without replacement."""

    population: int
    cohort_size: int

    def __post_init__(self) -> None:
        _check_sizes(self, "cohort_size")

    @property
    def neighboring_relation(self) -> NeighboringRelation:
        return NeighboringRelation.REPLACE_ONE

    def expected_cohort(self, population: int) -> float:
        return float(self.cohort_size)

    def sampled(self, gaussian: dp_event.GaussianDpEvent, round_index: int) -> dp_event.DpEvent:
        return self._without_replacement(self.population, gaussian)

    def draw(self, client_ids: Sequence[str], seed: int, round_index: int) -> list[str]:
        _check_population(self, client_ids)
        return self._drawn(client_ids, np.arange(self.population), seed, round_index)

    def _without_replacement(self, source: int, gaussian: dp_event.GaussianDpEvent) -> dp_event.DpEvent:
        """m of ``source`` users without replacement; replacing a user moves the C-clipped sum by 2C: z / 2."""
        return dp_event.SampledWithoutReplacementDpEvent(
            source, self.cohort_size, dp_event.GaussianDpEvent(gaussian.noise_multiplier / 2)
        )

    def _drawn(self, client_ids: Sequence[str], positions: np.ndarray, seed: int, round_index: int) -> list[str]:
        """m of the users at ``positions`` (ascending), drawn for round ``round_index``, in the order of the ids."""
        rng = numpy_generator(seed, round_index, "cohort")
        return [client_ids[i] for i in positions[np.sort(rng.choice(len(positions), self.cohort_size, replace=False))]]


@dataclass(frozen=True)
class CyclicFixedSizeSampling(FixedSizeSampling):
    """Cyclic fixed-size sampling: :class:`CyclicPoissonSampling`'s participation pattern with
    :class:`FixedSizeSampling`'s known cohort and neighbours (what SecAgg+ needs). A seeded permutation of the
    ``population`` users' positions, drawn once a run, deals them into ``groups`` k of ⌊N/k⌋ or ⌈N/k⌉ users; round t
    draws exactly ``cohort_size`` m of group t mod k without replacement. A user takes part at most once every k
    rounds, which banded matrix-factorization noise of at most k bands needs. Replace-one neighbours: the partition
    is uniform and reads no data, so the replacing user stands in the replaced one's group; given that group, the
    run is the composition of the group's rounds, each an m-of-n sample without replacement. The accountant prices
    ⌈T/k⌉ of them (group 0's rounds, the most of any group) at the smallest group's size ⌊N/k⌋: an upper bound for
    every group, exact when k divides N, and the worst case only when every round releases the same noise multiplier
    (the strategy's build refuses a schedule that varies it). k = 1 is :class:`FixedSizeSampling`, cohorts and
    events alike."""

    groups: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", _check_groups(self.groups))
        super().__post_init__()
        if self.cohort_size > self.smallest_group:
            raise PrivacyError(f"cohort_size must be at most the smallest group's {self.smallest_group} users "
                               f"(population {self.population} // groups {self.groups}), got {self.cohort_size}")

    @property
    def smallest_group(self) -> int:
        """⌊N/k⌋, the users of the smallest group."""
        return self.population // self.groups

    def sampled(self, gaussian: dp_event.GaussianDpEvent, round_index: int) -> dp_event.DpEvent:
        if round_index % self.groups:
            return dp_event.NoOpDpEvent()
        return self._without_replacement(self.smallest_group, gaussian)

    def group_positions(self, seed: int) -> list[np.ndarray]:
        """The k groups under the privacy ``seed``: the users' positions, each group in ascending order."""
        permutation = numpy_generator(seed, "cohort_groups").permutation(self.population)
        return [np.sort(group) for group in np.array_split(permutation, self.groups)]

    def draw(self, client_ids: Sequence[str], seed: int, round_index: int) -> list[str]:
        _check_population(self, client_ids)
        return self._drawn(client_ids, self.group_positions(seed)[round_index % self.groups], seed, round_index)


@dataclass(frozen=True)
class EpochBlocks:
    """No sampling (DP-FTRL, Kairouz et al. 2021): each epoch a seeded permutation of the ``population`` users
    (a fresh one per epoch, drawn like the other rules' cohorts) is dealt into k = N // ``block_size`` blocks of
    ⌊N/k⌋ or ⌈N/k⌉ users; round t trains block t mod k of epoch t div k. Every user takes part exactly once per
    epoch. The expected cohort is the mean block, N/k (= ``block_size`` when it divides N)."""

    population: int
    block_size: int

    def __post_init__(self) -> None:
        _check_sizes(self, "block_size")

    @property
    def rounds_per_epoch(self) -> int:
        """k, the blocks (rounds) of one epoch."""
        return self.population // self.block_size

    @property
    def neighboring_relation(self) -> NeighboringRelation:
        return NeighboringRelation.REPLACE_SPECIAL

    def expected_cohort(self, population: int) -> float:
        return self.population / self.rounds_per_epoch

    def sampled(self, gaussian: dp_event.GaussianDpEvent, round_index: int) -> dp_event.DpEvent:
        return gaussian

    def draw(self, client_ids: Sequence[str], seed: int, round_index: int) -> list[str]:
        _check_population(self, client_ids)
        epoch, block = divmod(round_index, self.rounds_per_epoch)
        permutation = numpy_generator(seed, epoch, "cohort_blocks").permutation(len(client_ids))
        chosen = np.array_split(permutation, self.rounds_per_epoch)[block]
        return [client_ids[i] for i in np.sort(chosen)]


def neighboring_relation(rule: CohortRule) -> NeighboringRelation:
    """The neighbouring relation the cohort rule is accounted under."""
    if not isinstance(rule, CohortRule):
        raise PrivacyError(
            f"the sampling must be a cohort rule (PoissonSampling, CyclicPoissonSampling, FixedSizeSampling, "
            f"CyclicFixedSizeSampling, EpochBlocks, ...), "
            f"got {type(rule).__name__}"
        )
    return rule.neighboring_relation


def composable(event: dp_event.DpEvent, relation: NeighboringRelation) -> bool:
    """Whether a dp-accounting accountant (RDP or PLD) composes ``event`` under ``relation``."""
    return rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation).supports(event) or (
        pld_privacy_accountant.PLDAccountant(relation).supports(event)
    )


def round_event(
    rule: CohortRule, mechanism_events: Sequence[dp_event.DpEvent], round_index: int
) -> dp_event.DpEvent:
    """The DP event of round ``round_index`` whose server steps emitted ``mechanism_events``.

    Each ``GaussianDpEvent(z)`` is a release of L2 sensitivity C with noise std z*C on the round's cohort;
    they all read the same cohort, so together they are one Gaussian with z_eff = (sum z_i^-2)^(-1/2),
    wrapped with the cohort rule's amplification in that round (:meth:`CohortRule.sampled`). ``NoOpDpEvent`` releases
    nothing. Any other event (e.g. ``SingleEpochTreeAggregationDpEvent``) is passed through as declared; one
    that no dp-accounting accountant composes under the rule's neighbouring relation is refused. A round with
    nothing private released is a ``NoOpDpEvent``; a release without noise (z = 0, or a
    ``NonPrivateDpEvent``) makes the round ``NonPrivateDpEvent``.
    """
    relation = neighboring_relation(rule)
    multipliers, others = [], []
    for i, event in enumerate(mechanism_events):
        if isinstance(event, dp_event.NoOpDpEvent):
            continue
        if not isinstance(event, dp_event.DpEvent):
            raise PrivacyError(f"mechanism_events[{i}] must be a dp_accounting DpEvent, got {type(event).__name__}")
        if not isinstance(event, dp_event.GaussianDpEvent):
            if not composable(event, relation):
                raise PrivacyError(
                    f"mechanism_events[{i}] is {type(event).__name__}, which no dp-accounting accountant composes "
                    f"under {relation.name} neighbours (those of the cohort rule {type(rule).__name__}): "
                    "choose a cohort rule whose relation it is accounted under"
                )
            others.append(event)
            continue
        z = event.noise_multiplier
        if not isinstance(z, Real) or math.isnan(z) or z < 0:
            raise PrivacyError(
                f"mechanism_events[{i}].noise_multiplier must be >= 0 (inf for no release), got {z!r}"
            )
        multipliers.append(float(z))
    if any(z == 0.0 for z in multipliers) or any(isinstance(e, dp_event.NonPrivateDpEvent) for e in others):
        return dp_event.NonPrivateDpEvent()
    finite = [z for z in multipliers if z != math.inf]
    if finite:
        others.insert(0, rule.sampled(dp_event.GaussianDpEvent(sum(z**-2 for z in finite) ** -0.5), round_index))
    return composed([(event, 1) for event in others if not isinstance(event, dp_event.NoOpDpEvent)])


def run_event(
    rule: CohortRule, mechanism_events: Sequence[dp_event.DpEvent], rounds: int
) -> dp_event.DpEvent:
    """``rounds`` rounds (0 to ``rounds`` − 1) each releasing ``mechanism_events``: every round's
    :func:`round_event` composed in order, equal consecutive rounds self-composed (``T`` times one event for a
    rule that amplifies every round alike; ⌈T/k⌉ for cyclic sampling)."""
    if isinstance(rounds, bool) or not isinstance(rounds, Integral) or rounds < 1:
        raise PrivacyError(f"rounds must be an integer >= 1, got {rounds!r}")
    groups: list[Group] = []
    for t in range(rounds):
        groups = merged(groups, round_event(rule, mechanism_events, t))
    return composed(groups)


def merged(groups: Sequence[Group], event: dp_event.DpEvent, count: int = 1) -> list[Group]:
    """``groups`` (event, count) followed by ``count`` times ``event``, merged into the last group when equal
    (a self-composition is unpacked, no-ops are dropped)."""
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return merged(groups, event.event, count * event.count)
    if isinstance(event, dp_event.NoOpDpEvent):
        return list(groups)
    if groups and groups[-1][0] == event:
        return [*groups[:-1], (event, groups[-1][1] + count)]
    return [*groups, (event, count)]


def composed(groups: Sequence[Group]) -> dp_event.DpEvent:
    """The (event, count) groups as one DpEvent: a group of several is self-composed; none is a no-op."""
    events = [event if count == 1 else dp_event.SelfComposedDpEvent(event, count) for event, count in groups]
    if not events:
        return dp_event.NoOpDpEvent()
    return events[0] if len(events) == 1 else dp_event.ComposedDpEvent(events)


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
