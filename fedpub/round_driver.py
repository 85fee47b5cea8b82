"""The round of DESIGN.md §3 once, for every backend: plan a round, then finish it from the replies.

:meth:`RoundDriver.plan` says who takes part in round t (the Poisson or fixed-size private cohort, the
public cohort, sampled apart and free) and what each sampled client is sent besides the model (AdaDPS's local
preconditioner, Li et al. 2023, Alg. 3). :meth:`RoundDriver.finish` hands the replies to the strategy core,
prices the round's **actual** DP event (PPSGD's and a budget schedule's z_t differ round to round) against
the budget *before* anything is released, and composes it into the accountant. The in-process engine, the
Flower strategy and the SecAgg+ variant are transports over it: they deliver the plan and bring the replies
back; they never sample, price or compose themselves.

A missing or failed reply contributes nothing (the denominator stays the expected cohort, the event is that
of the sampled cohort); when every sampled user failed in ``stop_after_failed_rounds`` rounds in a row, the
transport stops with :class:`CohortsKeepFailing` after recording the round (a broken client, not chance:
going on would spend the budget on noise).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import dp_accounting

from fedpub.column_update import UpdateValue
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.strategy import RoundOutcome, StrategyCore
from fedpub.types import Params, StepState, Updates

Reply = Mapping[str, UpdateValue]
"""One client's update (the parameters' keys; a tensor may be a ColumnUpdate)."""


class CohortsKeepFailing(RuntimeError):
    """Every sampled user failed in ``stop_after_failed_rounds`` rounds in a row: the run stopped."""


@dataclass(frozen=True)
class RoundPlan:
    """Who takes part in round ``round`` and what they are sent besides the global model."""

    round: int
    private_cohort: tuple[str, ...]
    public_cohort: tuple[str, ...]
    private_preconditioner: Updates | None = None
    """The A private clients divide their local gradients by (AdaDPS client placement), if any."""
    public_preconditioner: Updates | None = None

    def preconditioner(self, public: bool) -> Updates | None:
        return self.public_preconditioner if public else self.private_preconditioner


class RoundDriver:
    """Plans and finishes rounds of ``core`` over ``private_ids`` (the population N the core was built for; None:
    bound later with :meth:`bind_users`) and ``public_ids``, composing each released round into ``accountant``. ``budget_epsilon`` (at
    ``delta``): a round whose composition would exceed it is not released and the run stops there."""

    def __init__(
        self,
        core: StrategyCore,
        accountant: UserLevelAccountant,
        *,
        private_ids: Sequence[str] | None,
        public_ids: Sequence[str] = (),
        delta: float,
        budget_epsilon: float | None = None,
        stop_after_failed_rounds: int | None = None,
    ) -> None:
        self.core, self.accountant = core, accountant
        self.delta, self.budget_epsilon = delta, budget_epsilon
        self.stop_after_failed_rounds = stop_after_failed_rounds
        self.stopped_by_budget = False
        self.failed_streak = 0
        """Rounds in a row, up to the last finished one, in which every sampled private user failed."""
        self.private_ids: list[str] | None = None
        self.public_ids: list[str] = []
        if private_ids is not None:
            self.bind_users(private_ids, public_ids)

    def bind_users(self, private_ids: Sequence[str], public_ids: Sequence[str] = ()) -> None:
        """Set the population (when it was not known at construction: a Flower strategy learns it from the
        nodes that connect). The private ids must be the N the core was built for."""
        core = self.core
        if core.public_cohort and not public_ids:
            raise ValueError(
                f"strategy `{core.name}` trains {core.public_cohort} public users each round, but there are none: "
                "give the public users (data.public, a server-held pool or public nodes)"
            )
        if len(private_ids) != core.population:
            raise ValueError(f"strategy `{core.name}` was built for {core.population} private users, "
                             f"got {len(private_ids)}")
        overlap = sorted(set(private_ids) & set(public_ids))
        if overlap:
            raise ValueError(f"{len(overlap)} users are both private and public (first: {overlap[:3]})")
        self.private_ids, self.public_ids = list(private_ids), list(public_ids)

    def plan(self, round_index: int, state: StepState) -> RoundPlan:
        """Round ``round_index``'s cohorts (they depend only on the seed and the round) and client payloads
        (from the strategy state)."""
        if self.private_ids is None:
            raise RuntimeError("the round driver has no users yet: call bind_users first")
        return RoundPlan(
            round_index,
            tuple(self.core.sample_cohort(self.private_ids, round_index)),
            tuple(self.core.sample_public_cohort(self.public_ids, round_index)),
            self.core.local_preconditioner(state),
            self.core.local_preconditioner(state, public=True),
        )

    def finish(
        self,
        plan: RoundPlan,
        params: Params,
        state: StepState,
        private_replies: Mapping[str, Reply],
        public_replies: Mapping[str, Reply] = {},  # noqa: B006 (read only)
        *,
        extra: Sequence[Reply] = (),
    ) -> RoundOutcome | None:
        """Aggregate the round from the replies of the planned users (by user id; others are ignored, missing
        ones contribute nothing) plus ``extra`` private rows counted in the sampled cohort (an audit's canaries).
        Returns the outcome, its event composed, or None when releasing it would exceed the budget (then
        nothing is composed and :attr:`stopped_by_budget` is set)."""
        updates = [private_replies[c] for c in plan.private_cohort if c in private_replies] + list(extra)
        outcome = self.core.aggregate(
            params, updates, state, plan.round,
            sampled=len(plan.private_cohort) + len(extra),
            public_updates=[public_replies[c] for c in plan.public_cohort if c in public_replies],
        )
        return outcome if self.release(outcome.event, outcome.diagnostics) else None

    def release(self, event: dp_accounting.DpEvent, diagnostics: Mapping[str, float]) -> bool:
        """The budget rule: compose ``event`` (a round's actual event) unless that would take ε past the
        budget; count the round towards the failure streak (``diagnostics``: ``cohort_sampled``, ``cohort_failed``).
        False, and nothing composed, when the budget stops the run."""
        if self.stopped_by_budget or (
            self.budget_epsilon is not None and self.accountant.epsilon_if(event, self.delta) > self.budget_epsilon
        ):
            self.stopped_by_budget = True
            return False
        self.accountant.compose(event)
        sampled = diagnostics.get("cohort_sampled", 0.0)
        every_user_failed = sampled > 0 and diagnostics.get("cohort_failed", 0.0) == sampled
        self.failed_streak = self.failed_streak + 1 if every_user_failed else 0
        return True

    @property
    def keeps_failing(self) -> bool:
        """Whether the last ``stop_after_failed_rounds`` finished rounds all had every sampled user fail."""
        limit = self.stop_after_failed_rounds
        return limit is not None and self.failed_streak >= limit

    def cohorts_keep_failing(self, round_index: int, what_next: str) -> CohortsKeepFailing:
        """The error that stops a run after round ``round_index`` (when :attr:`keeps_failing`)."""
        first = round_index - self.failed_streak + 1
        return CohortsKeepFailing(
            f"every sampled user failed in rounds {first} to {round_index} (the log quotes their errors): stopped "
            f"after round {round_index} with ε = {self.accountant.epsilon(self.delta):.4g} spent; {what_next} "
            "(stop_after_failed_rounds sets how many such rounds stop a run)"
        )
