"""The strategy core: a cohort rule plus a chain of server steps, shared by every backend.

A strategy is a recipe, not a subclass (docs/design.md §2): ``strategies/*.py`` build a
:class:`StrategyCore` from config; the in-process engine and the Flower strategy both call
:meth:`StrategyCore.aggregate` with the cohort's updates and compose the returned DP event. Before any
round runs, :meth:`StrategyCore.planned_event` composes the events the steps declare (``Step.releases``)
into the run's planned event, which calibration and the budget check price.

A round is cut at the sum (docs/design.md §9): :meth:`StrategyCore.prepare_round` (no private data: the values a
device would be sent), :meth:`StrategyCore.per_user` wherever the updates are, and
:meth:`StrategyCore.finish_from_sum` from their sum. :meth:`StrategyCore.aggregate`, the in-process path, is their
composition, the cut summing the cohort's rows in one pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import dp_accounting
import torch

from fedpub import tree
from fedpub.cohort_updates import Cohort, global_norms, tensor_norms
from fedpub.column_update import ColumnUpdate, UpdateValue
from fedpub.payloads import ClientPayload, check_declared, payload_names, round_payloads
from fedpub.privacy.events import CohortRule, Group, composed, merged, round_event
from fedpub.seeding import numpy_generator
from fedpub.step import Chain, ChainPrep, Mapped, Releases, UserSum
from fedpub.types import Params, RoundContext, StepState, Updates


@dataclass(frozen=True)
class RoundOutcome:
    """The new global parameters, the new strategy state, the round's metrics (released: what DP covers) and
    diagnostics (un-noised statistics of the private users, outside the guarantee) and its DP event."""

    params: Params
    state: StepState
    metrics: Mapping[str, float]
    event: dp_accounting.DpEvent
    diagnostics: Mapping[str, float]


def fits(update: Mapping[str, UpdateValue], params: Params) -> bool:
    """True when ``update`` has exactly the parameters' keys, shapes and dtypes (another dtype would silently
    change the global model's, e.g. to float64). A tensor may be a :class:`~fedpub.column_update.ColumnUpdate`
    (its shape is the whole tensor's) whose columns are distinct and in range (:meth:`ColumnUpdate.well_formed`)."""
    return update.keys() == params.keys() and all(
        update[k].shape == params[k].shape and update[k].dtype == params[k].dtype
        and (not isinstance(update[k], ColumnUpdate) or update[k].well_formed())
        for k in params
    )


def usable_rows(updates: Sequence[Mapping[str, UpdateValue]], params: Params) -> Cohort:
    """The updates that :func:`fits` the parameters and hold only finite values, as rows whose norms are already
    known. Finiteness is read from each tensor's L2 norm, which the clip needs anyway (one batched reduction, no
    mask the size of the model): any NaN or Inf makes it non-finite; a finite tensor whose norm overflows (an
    entry above about 1.8e19 in float32) is refused too, which, like any refusal, only removes a contribution."""
    fitting = [u for u in updates if fits(u, params)]
    norms = tensor_norms(fitting, params)
    finite = torch.isfinite(norms).all(dim=1)
    usable = [u for u, ok in zip(fitting, finite.tolist(), strict=True) if ok]
    return Cohort(usable, params, norms=global_norms(norms[finite]))


@dataclass(frozen=True)
class RoundPrep:
    """A round prepared before any private update is seen: the global model and the chain's preparation (the
    round's context, the state, the values each per-user step's map reads: what a worker, a device or a secure
    sum's clients would be sent besides the model)."""

    params: Params
    chain: ChainPrep


@dataclass(frozen=True)
class StrategyCore:
    """``aggregator`` maps the stacked private updates to the increment of the global model; ``sampling`` is
    the cohort rule over the ``population`` private users; ``public_cohort`` public users per round (sampled apart, costing no privacy) provide its
    ``public_updates`` and ``public_mean`` inputs; the round driver refuses a public update whose norm exceeds
    ``public_update_bound``. ``client_payloads`` are what a round sends its clients besides the model (from
    the state: :mod:`fedpub.payloads`). ``noise_dimensions``: how many dimensions the released noise lies in when
    a step confines it (public-subspace projection with ``noise_space: subspace``: k), None for the model's d; the
    round driver's :class:`~fedpub.round_driver.NoisyBeyondSignal` check reads it."""

    name: str
    aggregator: Chain
    sampling: CohortRule
    population: int
    seed: int
    public_cohort: int = 0
    client_payloads: tuple[ClientPayload, ...] = ()
    public_update_bound: float = math.inf
    noise_dimensions: int | None = None

    def __post_init__(self) -> None:
        check_declared(self.client_payloads)
        if not self.aggregator.has_cut:
            raise ValueError(f"strategy `{self.name}`: its chain has no sum (an `aggregate` step)")

    def init(self, params: Params) -> StepState:
        return self.aggregator.init(params)

    @property
    def expected_cohort(self) -> float:
        return self.sampling.expected_cohort(self.population)

    def planned_round_event(self, round_index: int) -> dp_accounting.DpEvent:
        """The DP event round ``round_index`` will release, from its steps' declarations (no tensors)."""
        releases = self.aggregator.releases
        declared = Releases() if releases is None else releases(round_index)
        return round_event(self.sampling, declared.events, round_index)

    def planned_event(self, rounds: int) -> dp_accounting.DpEvent:
        """The planned run: rounds 0 to ``rounds`` − 1 composed in order, equal consecutive rounds self-composed."""
        groups: list[Group] = []
        for t in range(rounds):
            groups = merged(groups, self.planned_round_event(t))
        return composed(groups)

    def payloads(self, state: StepState, *, public: bool = False) -> dict[str, Updates]:
        """The payloads the round's private (or public) clients are sent, by name, from the state."""
        return round_payloads(self.client_payloads, state, public=public)

    def payload_names(self, *, public: bool = False) -> tuple[str, ...]:
        """The names of the payloads the private (or public) clients may be sent (none sent in some rounds)."""
        return payload_names(self.client_payloads, public=public)

    def sample_cohort(self, private_ids: Sequence[str], round_index: int) -> list[str]:
        """The private cohort of round ``round_index`` (depends only on seed and round)."""
        if len(private_ids) != self.population:
            raise ValueError(
                f"strategy was built for {self.population} private users, got {len(private_ids)}"
            )
        return self.sampling.draw(private_ids, self.seed, round_index)

    def sample_public_cohort(self, public_ids: Sequence[str], round_index: int) -> list[str]:
        """``public_cohort`` public users (all of them if fewer), without replacement."""
        size = min(self.public_cohort, len(public_ids))
        rng = numpy_generator(self.seed, round_index, "public_cohort")
        return [public_ids[i] for i in sorted(rng.choice(len(public_ids), size=size, replace=False))]

    def prepare_round(
        self,
        params: Params,
        state: StepState,
        round_index: int,
        *,
        sampled: int,
        public_updates: Sequence[Mapping[str, UpdateValue]] = (),
    ) -> RoundPrep:
        """Round ``round_index``'s preparation before any private update is seen (``sampled`` private users were
        asked): the round's inputs (:data:`~fedpub.types.ROUND_INPUTS`) from the usable public updates (their
        mean the ``public_mean`` input, None when there is none) and the per-user steps' preparations."""
        public_rows = usable_rows(public_updates, params)
        ctx = RoundContext(
            round=round_index,
            seed=self.seed,
            population=self.population,
            sampling_rate=self.expected_cohort / self.population,
            expected_cohort=self.expected_cohort,
            cohort_size=sampled,
            num_public=len(public_rows),
        )
        public_mean = public_rows.mean() if len(public_rows) else None
        prep = self.aggregator.prepare(params, state, ctx=ctx, public_mean=public_mean, public_updates=public_rows)
        return RoundPrep(params, prep)

    def per_user(self, rows: Cohort, prep: RoundPrep) -> Mapped:
        """The per-user part of the round on ``rows`` (a whole cohort, a worker's share or one user's update as a
        cohort of one row: :func:`usable_rows`), wherever they are: the updates to sum and the tallies to sum
        beside them (``step/tally``, one value per row), pure."""
        return self.aggregator.apply(rows, prep.chain)

    def finish_from_sum(
        self, prep: RoundPrep, total: Updates, users: int, tallies: Mapping[str, float]
    ) -> RoundOutcome:
        """The rest of the round from the sum of :meth:`per_user` over the ``users`` whose updates it holds (summed
        in process, across workers or by a secure sum) and their ``tallies`` summed. The per-user diagnostics stay
        where the users were."""
        return self._finish(prep, UserSum(Cohort([total], prep.params), users, tallies), {})

    def aggregate(
        self,
        params: Params,
        updates: Sequence[Mapping[str, UpdateValue]],
        state: StepState,
        round_index: int,
        *,
        sampled: int | None = None,
        public_updates: Sequence[Updates] = (),
    ) -> RoundOutcome:
        """Aggregate the replies of one round in process: :meth:`prepare_round`, :meth:`per_user` on the usable
        rows, and :meth:`finish_from_sum` of their sum, formed by the cut in one pass. Unusable replies (NaN/Inf,
        wrong keys or shapes) and missing ones (``sampled`` users were asked, default ``len(updates)``) contribute
        nothing: the mechanism and its accounting stay those of the sampled cohort. The steps get the usable
        updates as a :class:`~fedpub.cohort_updates.Cohort` (never stacked unless a step asks)."""
        sampled = len(updates) if sampled is None else sampled
        prep = self.prepare_round(params, state, round_index, sampled=sampled, public_updates=public_updates)
        return self.finish_from_users(prep, self.per_user(usable_rows(updates, params), prep))

    def finish_from_users(self, prep: RoundPrep, mapped: Mapped) -> RoundOutcome:
        """The rest of the round from the per-user part of the users in process (:meth:`per_user`), their rows
        summed by the cut (the same values as :meth:`finish_from_sum` of their sum formed in the same order)."""
        total = UserSum(mapped.updates, len(mapped.updates), mapped.tally_sums())
        return self._finish(prep, total, mapped.diagnostics)

    def _finish(self, prep: RoundPrep, total: UserSum, diagnostics: Mapping[str, float]) -> RoundOutcome:
        result = self.aggregator.finish(total, prep.chain, diagnostics=diagnostics)
        metrics = dict(result.metrics)
        if self.public_cohort:
            metrics["public_cohort_used"] = float(prep.chain.ctx.num_public)
        sampled = prep.chain.ctx.cohort_size
        diagnostics = {
            **result.diagnostics, "cohort_sampled": float(sampled), "cohort_failed": float(sampled - total.users)
        }
        new_params = tree.add(prep.params, result.updates)
        return RoundOutcome(
            new_params, result.state, metrics, round_event(self.sampling, result.events, prep.chain.ctx.round), diagnostics
        )
