"""User-level privacy accounting of a federated run with dp-accounting (PLD by default, RDP cross-check).

The round loop composes each round's DpEvent (see ``events.py``; user-level DP-FedAvg accounting as in
McMahan et al. 2018) into a :class:`UserLevelAccountant`. It keeps the ledger grouped (consecutive
equal events become one ``SelfComposedDpEvent``, so a homogeneous run is a single self-composition,
which the PLD accountant evaluates by FFT) and evaluates epsilon from the groups, each distinct event's
privacy curve built once by dp-accounting (``composition.py``), caching the last result. ``epsilon_if``
prices the next round without composing it, so a run can stop before its budget is exceeded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Literal

import attr
import dp_accounting
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from fedpub.privacy.composition import grouped_epsilon
from fedpub.privacy.errors import BudgetExceededError, PrivacyError
from fedpub.privacy.events import (
    CohortRule,
    Group,
    composed,
    event_from_dict,
    event_to_dict,
    merged,
    neighboring_relation,
    run_event,
)

# At small noise multipliers the RDP accountant drops fractional orders it cannot evaluate and warns for each; the
# result is still a valid upper bound, so the warnings are dropped. They went through absl, whose every call (even
# one its verbosity drops) first runs logging.basicConfig() when the root logger has no handler: a process that
# accounted once then printed every record reaching the root (Flower's DEBUG lines, its INFO lines a second time).
# So dp-accounting's RDP module logs through a standard logger instead, which adds no handler anywhere.
_RDP_LOG = logging.getLogger("dp_accounting.rdp")
_RDP_LOG.setLevel(logging.ERROR)
rdp_privacy_accountant.logging = _RDP_LOG

AccountantKind = Literal["pld", "rdp"]
ACCOUNTANTS: tuple[AccountantKind, ...] = ("pld", "rdp")
NeighboringRelation = dp_accounting.NeighboringRelation


def _check_delta(delta: float) -> None:
    if isinstance(delta, bool) or not isinstance(delta, Real) or not 0.0 < delta < 1.0:
        raise PrivacyError(f"delta must be a number in (0, 1), got {delta!r}")


def make_dp_accountant(
    accountant: AccountantKind,
    neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE,
    pld_discretization: float = 1e-4,
) -> dp_accounting.PrivacyAccountant:
    """A fresh, empty dp-accounting accountant of the given kind."""
    if accountant == "pld":
        return pld_privacy_accountant.PLDAccountant(
            neighboring_relation, value_discretization_interval=pld_discretization
        )
    if accountant == "rdp":
        return rdp_privacy_accountant.RdpAccountant(neighboring_relation=neighboring_relation)
    raise PrivacyError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")


def _event_types(event: dp_event.DpEvent) -> set[type]:
    """The classes of ``event`` and of every event nested in it."""
    found = {type(event)}
    for value in attr.asdict(event, recurse=False).values():
        for child in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(child, dp_event.DpEvent):
                found |= _event_types(child)
    return found


class UserLevelAccountant:
    """Composes the DP events of a run and reports its epsilon at any delta."""

    def __init__(
        self,
        accountant: AccountantKind = "pld",
        neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE,
        pld_discretization: float = 1e-4,
    ) -> None:
        if accountant not in ACCOUNTANTS:
            raise PrivacyError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
        if not isinstance(neighboring_relation, NeighboringRelation):
            raise PrivacyError(
                f"neighboring_relation must be one of {[r.name for r in NeighboringRelation]}, "
                f"got {neighboring_relation!r}"
            )
        if not isinstance(pld_discretization, Real) or not 0.0 < pld_discretization < math.inf:
            raise PrivacyError(f"pld_discretization must be a positive number, got {pld_discretization!r}")
        self._kind: AccountantKind = accountant
        self._relation = neighboring_relation
        self._discretization = float(pld_discretization)
        self._groups: list[Group] = []
        self._rounds = 0
        self._last: tuple[list[Group], float, float] | None = None  # (groups, delta, epsilon)

    @property
    def accountant(self) -> AccountantKind:
        """Which dp-accounting accountant evaluates epsilon: "pld" or "rdp"."""
        return self._kind

    @property
    def neighboring_relation(self) -> NeighboringRelation:
        """Which datasets are neighbours: ADD_OR_REMOVE_ONE (Poisson), REPLACE_ONE (fixed size) or REPLACE_SPECIAL
        (epoch blocks)."""
        return self._relation

    @property
    def pld_discretization(self) -> float:
        """The PLD accountant's value discretization interval (unused by RDP)."""
        return self._discretization

    @property
    def rounds(self) -> int:
        """The sum of the ``count`` arguments of :meth:`compose` so far (no-op rounds included)."""
        return self._rounds

    @property
    def ledger(self) -> dp_event.DpEvent:
        """Everything composed so far as one DpEvent, equal consecutive events self-composed."""
        return composed(self._groups)

    def check_supported(self, event: dp_event.DpEvent) -> None:
        """Raise a PrivacyError saying what to use instead if this accountant cannot account ``event``."""
        if not isinstance(event, dp_event.DpEvent):
            raise PrivacyError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}")
        if make_dp_accountant(self._kind, self._relation, self._discretization).supports(event):
            return
        types = _event_types(event)
        others = [k for k in ACCOUNTANTS if k != self._kind
                  and make_dp_accountant(k, self._relation, self._discretization).supports(event)]
        if dp_event.SampledWithoutReplacementDpEvent in types:
            hint = "fixed-size sampling is accounted only by accountant='rdp' with REPLACE_ONE"
        elif dp_event.PoissonSampledDpEvent in types and self._relation == NeighboringRelation.REPLACE_ONE:
            hint = "Poisson sampling needs neighboring_relation=ADD_OR_REMOVE_ONE (or accountant='pld')"
        elif others:
            hint = f"it is accounted only by accountant={others[0]!r}"
        else:
            hint = "build round events with fedpub.privacy.round_event"
        raise PrivacyError(
            f"the {self._kind} accountant with neighboring_relation={self._relation.name} does not "
            f"support {type(event).__name__} ({event}); {hint}"
        )

    def compose(self, event: dp_event.DpEvent, count: int = 1) -> None:
        """Add ``count`` repetitions of ``event`` to the run."""
        self._groups = self._with(event, count)
        self._rounds += int(count)

    def epsilon(self, delta: float) -> float:
        """Epsilon of everything composed so far at ``delta`` (0.0 when nothing private happened)."""
        return self._epsilon(self._groups, delta)

    def epsilon_if(self, event: dp_event.DpEvent, delta: float, count: int = 1) -> float:
        """Epsilon if ``count`` times ``event`` were composed next; the state is left unchanged."""
        return self._epsilon(self._with(event, count), delta)

    def _with(self, event: dp_event.DpEvent, count: int) -> list[Group]:
        if isinstance(count, bool) or not isinstance(count, Integral) or count < 1:
            raise PrivacyError(f"count must be an integer >= 1, got {count!r}")
        self.check_supported(event)
        return merged(self._groups, event, int(count))

    def _epsilon(self, groups: list[Group], delta: float) -> float:
        _check_delta(delta)
        if not groups:
            return 0.0
        if self._last is not None and self._last[1] == delta and self._last[0] == groups:
            return self._last[2]
        setting = (self._kind, self._relation, self._discretization)
        epsilon = grouped_epsilon(lambda: make_dp_accountant(*setting), setting, groups, delta)
        self._last = (groups, delta, epsilon)
        return epsilon

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description from which :meth:`from_dict` rebuilds this accountant exactly."""
        return {
            "accountant": self._kind,
            "neighboring_relation": self._relation.name,
            "pld_discretization": self._discretization,
            "rounds": self._rounds,
            "groups": [{"event": event_to_dict(event), "count": count} for event, count in self._groups],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UserLevelAccountant:
        """The accountant that :meth:`to_dict` described."""
        missing = {"accountant", "neighboring_relation", "pld_discretization", "rounds", "groups"} - set(data)
        if missing:
            raise PrivacyError(f"accountant state is missing the fields {sorted(missing)}")
        relations = [r.name for r in NeighboringRelation]
        if data["neighboring_relation"] not in relations:
            raise PrivacyError(
                f"neighboring_relation must be one of {relations}, got {data['neighboring_relation']!r}"
            )
        relation = NeighboringRelation[data["neighboring_relation"]]
        accountant = cls(data["accountant"], relation, data["pld_discretization"])
        for i, group in enumerate(data["groups"]):
            if not isinstance(group, Mapping) or {"event", "count"} - set(group):
                raise PrivacyError(f"groups[{i}] must be a dict with 'event' and 'count', got {group!r}")
            accountant.compose(event_from_dict(group["event"]), group["count"])
        accountant._rounds = int(data["rounds"])
        return accountant


def epsilon_for(
    sampling: CohortRule,
    noise_multiplier: float,
    rounds: int,
    delta: float,
    accountant: AccountantKind = "pld",
    *,
    pld_discretization: float = 1e-4,
) -> float:
    """Epsilon after rounds 0 to ``rounds`` − 1, each releasing one Gaussian of ``noise_multiplier`` on its cohort
    (:func:`~fedpub.privacy.events.run_event`: the cohort rule says how each round is amplified)."""
    user_accountant = UserLevelAccountant(accountant, neighboring_relation(sampling), pld_discretization)
    user_accountant.compose(run_event(sampling, [dp_event.GaussianDpEvent(noise_multiplier)], rounds))
    return user_accountant.epsilon(delta)


def cross_check(
    event_or_ledger: dp_event.DpEvent,
    delta: float,
    neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE,
    pld_discretization: float = 1e-4,
    accountants: Sequence[AccountantKind] = ACCOUNTANTS,
) -> dict[str, float]:
    """Epsilon of ``event_or_ledger`` under each of ``accountants``; an accountant that does not
    support the event is left out."""
    if not isinstance(event_or_ledger, dp_event.DpEvent):
        raise PrivacyError(
            f"event_or_ledger must be a dp_accounting DpEvent, got {type(event_or_ledger).__name__}"
        )
    results = {}
    for kind in accountants:
        if make_dp_accountant(kind, neighboring_relation, pld_discretization).supports(event_or_ledger):
            user_accountant = UserLevelAccountant(kind, neighboring_relation, pld_discretization)
            user_accountant.compose(event_or_ledger)
            results[kind] = user_accountant.epsilon(delta)
    return results


@dataclass(frozen=True)
class PrivacyBudget:
    """The (epsilon, delta) a run may spend in total."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        e = self.epsilon
        if isinstance(e, bool) or not isinstance(e, Real) or not 0.0 < e < math.inf:
            raise PrivacyError(f"epsilon must be a finite number > 0, got {e!r}")
        _check_delta(self.delta)


def check_first_round(
    budget: PrivacyBudget, accountant: UserLevelAccountant, event: dp_event.DpEvent
) -> float:
    """Epsilon of one round ``event`` alone (with ``accountant``'s settings); raises
    BudgetExceededError when that already exceeds ``budget``."""
    fresh = UserLevelAccountant(
        accountant.accountant, accountant.neighboring_relation, accountant.pld_discretization
    )
    epsilon = fresh.epsilon_if(event, budget.delta)
    if epsilon > budget.epsilon:
        raise BudgetExceededError(
            f"a single round costs epsilon={epsilon:.6g} at delta={budget.delta:g} "
            f"({accountant.accountant} accountant), more than the budget epsilon={budget.epsilon:g}; "
            "raise the noise multiplier, lower the sampling rate or raise the budget"
        )
    return epsilon
