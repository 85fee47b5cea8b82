"""The round of docs/design.md §3 once, for every backend: plan a round, then finish it from the replies.

:meth:`RoundDriver.plan` says who takes part in round t (the Poisson or fixed-size private cohort, the
public cohort, sampled apart and free) and what each sampled client is sent besides the model (the recipe's
client payloads, :mod:`fedpub.payloads`, e.g. AdaDPS's local preconditioner, Li et al. 2023, Alg. 3).
:meth:`RoundDriver.finish` hands the replies to the strategy core, prices the round's **actual** DP event (PPSGD's and a budget schedule's z_t differ round to round) against
the budget *before* anything is released, and composes it into the accountant. The in-process engine, the
Flower strategy and SecAgg+ are transports over it: they deliver the plan and bring the replies
back; they never sample, price or compose themselves. A transport that sums the per-user part elsewhere (workers,
devices, a secure sum) uses the round's two halves instead: :meth:`RoundDriver.prepare` (what the users' side is
sent: :class:`~fedpub.strategy.RoundPrep`) and :meth:`RoundDriver.finish_from_sum`.

:meth:`RoundDriver.admit` is the budget rule before a round starts: a round past the planned ones (the rounds
the noise was calibrated and the recipe laid out over) or whose planned event would take ε past the budget is
refused, with :attr:`RoundDriver.refusal` naming ε so far, ε with the round and the budget; ``finish`` asks it
too, so a transport that runs more rounds than planned releases nothing past them.

A missing or failed reply contributes nothing (the denominator stays the expected cohort, the event is that
of the sampled cohort); when every sampled user failed in ``stop_after_failed_rounds`` rounds in a row, the
transport stops with :class:`CohortsKeepFailing` after recording the round (a broken client, not chance:
going on would spend the budget on noise). A public update that is not finite or whose norm exceeds the core's
``public_update_bound`` is refused with a :class:`PublicUpdateRefused` warning naming the user and the round,
and a round left without any public update says so (its public part, e.g. DOPE's center, is then absent).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import dp_accounting

from fedpub.cohort_updates import global_norms, tensor_norms
from fedpub.column_update import UpdateValue
from fedpub.payloads import Payloads
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.strategy import RoundOutcome, RoundPrep, StrategyCore, fits, usable_rows
from fedpub.types import Params, StepState, Updates

Reply = Mapping[str, UpdateValue]
"""One client's update (the parameters' keys; a tensor may be a ColumnUpdate)."""


class CohortsKeepFailing(RuntimeError):
    """Every sampled user failed in ``stop_after_failed_rounds`` rounds in a row: the run stopped."""


class PublicUpdateRefused(UserWarning):
    """A public user's update was refused (not the model's names and shapes, not finite, or larger than the
    core's ``public_update_bound``), or a round was left with no public update at all."""


class NoisyBeyondSignal(UserWarning):
    """The noise the planned run adds to the model exceeds the most its clipped updates can move it: a run that
    will learn little (a target ε too small for the model's size, the cohort and the rounds)."""


def noise_beyond_signal(noise_multiplier: float, expected_cohort: float, rounds: int, dimension: int) -> str | None:
    """Why ``rounds`` rounds of noise z·C/m on each of ``dimension`` coordinates bury the signal, or None. The
    noise summed over the run has norm about √(T·d)·z·C/m; the clipped means (each of norm at most C) move the
    model by at most T·C: the first exceeds the second when z·√d/m > √T."""
    per_round = noise_multiplier * math.sqrt(dimension) / expected_cohort
    if per_round <= math.sqrt(rounds):
        return None
    return (
        f"noise multiplier z = {noise_multiplier:.4g} in d = {dimension} dimensions with an expected "
        f"cohort m = {expected_cohort:g}: each round's noise on the mean has norm about z·√d/m·C = "
        f"{per_round:.3g}·C, and over the {rounds} planned rounds the noise "
        f"(≈ {per_round * math.sqrt(rounds):.3g}·C) "
        f"exceeds the most the clipped updates can move the model ({rounds}·C), so the model will learn little; "
        "lower the noise (a larger target ε), or raise the cohort or the rounds"
    )


@dataclass(frozen=True)
class RoundPlan:
    """Who takes part in round ``round`` and what they are sent besides the global model: the payloads of the
    private and of the public clients, by name (:mod:`fedpub.payloads`)."""

    round: int
    private_cohort: tuple[str, ...]
    public_cohort: tuple[str, ...]
    private_payloads: Payloads = field(default_factory=dict)
    public_payloads: Payloads = field(default_factory=dict)

    def payloads(self, public: bool) -> Payloads:
        return self.public_payloads if public else self.private_payloads


@dataclass(frozen=True)
class PreparedRound:
    """A planned round prepared from its public replies: the core's :class:`~fedpub.strategy.RoundPrep` and how
    many public replies were refused."""

    plan: RoundPlan
    prep: RoundPrep
    public_refused: int


class RoundDriver:
    """Plans and finishes rounds of ``core`` over ``private_ids`` (the population N the core was built for; None:
    bound later with :meth:`bind_users`) and ``public_ids``, composing each released round into ``accountant``.
    ``budget_epsilon`` (at ``delta``): a round whose composition would exceed it is not released and the run stops
    there; ``planned_rounds``: the rounds the recipe was built for (its noise calibrated to a target ε over them,
    its schedules laid out over them), a later round is refused the same way (None: no limit). ``noise_multiplier``
    (z, with ``planned_rounds``): the first finished round warns with :class:`NoisyBeyondSignal` when the planned
    run's noise buries what the model can learn."""

    def __init__(
        self,
        core: StrategyCore,
        accountant: UserLevelAccountant,
        *,
        private_ids: Sequence[str] | None,
        public_ids: Sequence[str] = (),
        delta: float,
        budget_epsilon: float | None = None,
        planned_rounds: int | None = None,
        noise_multiplier: float | None = None,
        stop_after_failed_rounds: int | None = None,
    ) -> None:
        self.core, self.accountant = core, accountant
        self.delta, self.budget_epsilon = delta, budget_epsilon
        self.planned_rounds, self.noise_multiplier = planned_rounds, noise_multiplier
        self.stop_after_failed_rounds = stop_after_failed_rounds
        self.stopped_by_budget = False
        self.refusal: str | None = None
        """Why the run stopped before a round (ε so far, ε with the round, the budget or the planned rounds)."""
        self._noise_checked = False
        self._admitted: int | None = None
        """The round :meth:`admit` last let through (a transport admits it, then :meth:`prepare` asks again)."""
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
            self.core.payloads(state),
            self.core.payloads(state, public=True),
        )

    def admit(self, round_index: int) -> bool:
        """Whether round ``round_index`` may run: within the planned rounds and, with a budget, its planned event
        within it (a round's actual event may cost more: :meth:`release` prices that one). False, with
        :attr:`stopped_by_budget` set and :attr:`refusal` saying why, before anything of the round is sent."""
        if self.stopped_by_budget:
            return False
        if round_index == self._admitted:  # nothing composed since: the same answer, without pricing again
            return True
        planned = self.planned_rounds
        if planned is not None and round_index >= planned:
            budget = "" if self.budget_epsilon is None else f" of the budget ε = {self.budget_epsilon:g}"
            return self._refuse(
                f"round {round_index} is past the {planned} planned rounds (0 to {planned - 1}: the noise was "
                f"calibrated and the recipe laid out over them), ε = {self._spent():.6g} spent{budget}"
            )
        if not self._within_budget(f"round {round_index}", self.core.planned_round_event(round_index)):
            return False
        self._admitted = round_index
        return True

    def _within_budget(self, which: str, event: dp_accounting.DpEvent) -> bool:
        if self.budget_epsilon is None:
            return True
        after = self.accountant.epsilon_if(event, self.delta)
        if after <= self.budget_epsilon:
            return True
        return self._refuse(
            f"{which} would take ε from {self._spent():.6g} to {after:.6g}, past the budget "
            f"ε = {self.budget_epsilon:g} (δ = {self.delta:g})"
        )

    def _spent(self) -> float:
        return self.accountant.epsilon(self.delta)

    def _refuse(self, why: str) -> bool:
        self.stopped_by_budget, self.refusal = True, f"{why}: the round is not released, no more rounds run"
        return False

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
        Returns the outcome, its event composed, or None when the round is refused (:meth:`admit`) or releasing
        it would exceed the budget (then nothing is composed and :attr:`stopped_by_budget` is set)."""
        prepared = self.prepare(plan, params, state, public_replies, extra=len(extra))
        if prepared is None:
            return None
        updates = [private_replies[c] for c in plan.private_cohort if c in private_replies] + list(extra)
        mapped = self.core.per_user(usable_rows(updates, params), prepared.prep)
        return self._released(prepared, self.core.finish_from_users(prepared.prep, mapped))

    def prepare(
        self,
        plan: RoundPlan,
        params: Params,
        state: StepState,
        public_replies: Mapping[str, Reply] = {},  # noqa: B006 (read only)
        *,
        extra: int = 0,
    ) -> PreparedRound | None:
        """The round's first half, before any private update is seen: the round admitted (None when refused:
        :meth:`admit`), its public replies screened (:meth:`screen_public`) and the core's preparation
        (:meth:`StrategyCore.prepare_round`, for the plan's private cohort plus ``extra`` rows)."""
        if not self.admit(plan.round):
            return None
        self._check_noise(params)
        public = self.screen_public(plan, params, public_replies)
        answered = sum(1 for c in plan.public_cohort if c in public_replies)
        prep = self.core.prepare_round(params, state, plan.round, sampled=len(plan.private_cohort) + extra,
                                       public_updates=public)
        return PreparedRound(plan, prep, answered - len(public))

    def finish_from_sum(
        self, prepared: PreparedRound, total: Updates, users: int, tallies: Mapping[str, float]
    ) -> RoundOutcome | None:
        """The round's second half from the sum of the per-user part (:meth:`StrategyCore.per_user`) over
        ``users`` users and their summed ``tallies``: the outcome, its event composed, or None when releasing it
        would exceed the budget."""
        return self._released(prepared, self.core.finish_from_sum(prepared.prep, total, users, tallies))

    def _released(self, prepared: PreparedRound, outcome: RoundOutcome) -> RoundOutcome | None:
        if self.core.public_cohort:
            outcome = replace(outcome, metrics={**outcome.metrics, "public_cohort_refused": prepared.public_refused})
        released = self.release(outcome.event, outcome.diagnostics, round_index=prepared.plan.round)
        return outcome if released else None

    def screen_public(self, plan: RoundPlan, params: Params, replies: Mapping[str, Reply]) -> list[Reply]:
        """The usable updates of ``plan``'s public cohort among ``replies``. One without the model's names and
        shapes, not finite, or of norm above the core's ``public_update_bound`` (a diverged public user) is
        refused with a :class:`PublicUpdateRefused` warning naming the user and the round; a round whose public
        cohort leaves no usable update warns too. Public users cost no privacy: this changes what the recipe's
        public part sees, never the private mechanism or its accounting."""
        answered = [(c, replies[c]) for c in plan.public_cohort if c in replies]
        fitting = [(c, u) for c, u in answered if fits(u, params)]
        norms = global_norms(tensor_norms([u for _, u in fitting], params)).tolist()
        bound = self.core.public_update_bound
        fitted = {c for c, _ in fitting}
        refused = {c: "its names, shapes or dtypes are not the model's" for c, _ in answered if c not in fitted}
        for (cid, _), norm in zip(fitting, norms, strict=True):
            if not math.isfinite(norm):
                refused[cid] = "it is not finite (NaN or Inf)"
            elif norm > bound:
                refused[cid] = f"its norm {norm:.4g} exceeds the public update bound {bound:.4g}"
        for cid, why in refused.items():
            warnings.warn(f"round {plan.round}: public user {cid}'s update is refused: {why}",
                          PublicUpdateRefused, stacklevel=3)
        usable = [u for c, u in fitting if c not in refused]
        if plan.public_cohort and not usable:
            warnings.warn(
                f"round {plan.round}: none of the {len(plan.public_cohort)} sampled public users gave a usable "
                f"update ({len(answered)} replied, {len(refused)} refused): the round runs without its public part "
                f"(strategy `{self.core.name}`: no center, public statistics or public step this round)",
                PublicUpdateRefused, stacklevel=3,
            )
        return usable

    def _check_noise(self, params: Params) -> None:
        """Warn once, at the first finished round, when the planned run's noise buries the signal."""
        if self._noise_checked or self.noise_multiplier is None or self.planned_rounds is None:
            return
        self._noise_checked = True
        dimension = sum(p.numel() for p in params.values())
        if self.core.noise_dimensions is not None:
            dimension = min(dimension, self.core.noise_dimensions)
        why = noise_beyond_signal(self.noise_multiplier, self.core.expected_cohort, self.planned_rounds, dimension)
        if why is not None:
            warnings.warn(why, NoisyBeyondSignal, stacklevel=3)

    def release(
        self, event: dp_accounting.DpEvent, diagnostics: Mapping[str, float], *, round_index: int | None = None
    ) -> bool:
        """The budget rule: compose ``event`` (round ``round_index``'s actual event) unless that would take ε past
        the budget; count the round towards the failure streak (``diagnostics``: ``cohort_sampled``,
        ``cohort_failed``). False, and nothing composed, when the budget stops the run (:attr:`refusal` says why)."""
        which = "the round" if round_index is None else f"round {round_index}"
        if self.stopped_by_budget or not self._within_budget(which, event):
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
