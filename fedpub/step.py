"""Server steps as pairs of pure functions, composed optax-style.

A :class:`Step` is ``init(params) -> state`` and
``update(updates, state, *, ctx, **inputs) -> StepResult``. Nothing is kept on the step object;
the state goes in and the new state comes out. A step that keeps nothing is :func:`stateless`: its state
is the empty :class:`EmptyState`. (After optax's ``GradientTransformation``.)

A step declares the keyword inputs it reads, required (``inputs``) or not (``optional_inputs``), and the
``outputs`` it hands to the later steps. :func:`named_chain` runs steps in order and checks, when it is built,
that every required input is provided by the round (:data:`~fedpub.types.ROUND_INPUTS`) or an earlier step,
and that no step writes a name the round or an earlier step already provides, unless the step reads that name
too (then it replaces it on purpose, as preconditioning the public mean does). When it runs, each step gets
only the names it declares. :func:`chain` names the steps by position.

A step that releases something private also *declares* it: ``releases(round_index, **inputs)`` says, before
any tensor exists, which DP events its ``update`` will emit in that round (and which declared values, such as
the round's noise multiplier, it hands the later steps' declarations, as ``update`` hands its ``outputs``).
The chain's declaration is its steps' in order, so a recipe's planned run is known from its steps alone
(calibration prices it for any noise multiplier; docs/design.md §3, §5).

**Phases.** A step declares where in the round it runs (docs/design.md §9; pfl-research's ``postprocess_one_user`` /
``postprocess_server``): ``per_user``, on each user's update before the sum (:func:`user_step`); ``cut``, the sum
itself (:func:`cut_step`: ``aggregate``); ``after_sum``, on the one (mean) update after it (:func:`after_sum_step`).
A per-user step is three pure parts, so its per-user map can run wherever an update is (in process, on a worker, on
a device): ``prepare(like, state, *, ctx, **inputs) -> Prepared``, the server's preparation from its state and the
round's public inputs (the values the map reads: what a device would be sent); ``apply(updates, values) -> Mapped``,
the map of a :class:`~fedpub.cohort_updates.Cohort` (one user is a cohort of one row) and the per-user tallies
summed beside the updates (adaptive clipping's unclipped bit); and ``finish(total, state, *, ctx, values) ->
Finished``, after the sum, reading the summed tallies. Its ``update`` is their composition. :func:`named_chain`
refuses, naming the step, a per-user step after the cut, an after-sum step before it, and a second cut;
:func:`prepare_chain`, :func:`apply_chain` and :func:`finish_chain` run a chain's round in those three parts (a
chain's ``update`` is their composition; :class:`~fedpub.strategy.StrategyCore` exposes them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypedDict

import dp_accounting
import torch

from fedpub.cohort_updates import Cohort
from fedpub.types import ROUND_INPUTS, Params, RoundContext, StepState, Updates


@dataclass(frozen=True)
class StepResult:
    """What a step's ``update`` returns: the steps before the average hand on a
    :class:`~fedpub.cohort_updates.Cohort`, the average and the steps after it one update.

    ``outputs`` are named values later steps of a chain receive as keyword inputs (for example the
    clip step's ``clip_norm`` read by the noise step); ``events`` are the DP events this step's
    release costs, composed by the round loop.

    ``metrics`` are released with the model: only what DP covers (noised values, functions of the released
    model, the config or public users). ``diagnostics`` are un-noised statistics of the private users (norms, the
    exact clipped fraction, the realised cohort): they go to the run's diagnostics file, outside the guarantee.
    """

    updates: Cohort | Updates
    state: StepState
    metrics: Mapping[str, float] = field(default_factory=dict)
    events: tuple[dp_accounting.DpEvent, ...] = ()
    outputs: Mapping[str, Any] = field(default_factory=dict)
    diagnostics: Mapping[str, float] = field(default_factory=dict)


InitFn = Callable[[Params], StepState]
UpdateFn = Callable[..., StepResult]
ChainState = dict[str, StepState]
"""A chain's state: each step's state by the step's name."""

Phase = Literal["per_user", "cut", "after_sum", "round"]
"""Where a step runs: on each user's update before the sum, the sum itself, or on the one update after it; a
chain that runs from the users' updates (:func:`named_chain`) is a ``round``."""

PHASES: tuple[Phase, ...] = ("per_user", "cut", "after_sum", "round")


class EmptyState(TypedDict):
    """The state of a step that keeps nothing between rounds (``{}``)."""


@dataclass(frozen=True)
class Releases:
    """What a step declares for one round: the DP events its ``update`` will emit, and the declared values
    (by output name) later steps' declarations receive as keyword inputs."""

    events: tuple[dp_accounting.DpEvent, ...] = ()
    outputs: Mapping[str, Any] = field(default_factory=dict)


ReleasesFn = Callable[..., Releases]
"""``releases(round_index, **inputs) -> Releases``: the declaration of a round, computed without tensors; it
receives the declared values of the names the step reads that earlier declarations provide."""


@dataclass(frozen=True)
class Prepared:
    """A per-user step's preparation of a round, before any private update is seen: its new state, the
    ``values`` its per-user map reads (what a device would be sent: a center, a preconditioner, a clip norm), the
    ``outputs`` later steps read and released ``metrics`` (functions of the state and public inputs only)."""

    state: StepState
    values: Mapping[str, Any] = field(default_factory=dict)
    outputs: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Mapped:
    """The per-user map of a cohort: its updates, per-user ``tallies`` (one value per row, by name, summed beside
    the updates: what the step reads after the sum) and ``diagnostics`` (un-noised statistics of these users,
    outside the guarantee)."""

    updates: Cohort
    tallies: Mapping[str, torch.Tensor] = field(default_factory=dict)
    diagnostics: Mapping[str, float] = field(default_factory=dict)

    def tally_sums(self) -> dict[str, float]:
        """Each tally summed over the rows."""
        return {name: float(values.sum()) for name, values in self.tallies.items()}


@dataclass(frozen=True)
class UserSum:
    """The per-user part summed over the users: a cohort whose sum is their updates' sum (their own rows in
    process, summed lazily by the cut; or the one row of a sum formed elsewhere), how many ``users`` it holds and
    their ``tallies`` summed (by name)."""

    updates: Cohort
    users: int
    tallies: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Finished:
    """What a per-user step reads after the sum gives: its new state, released metrics and DP events."""

    state: StepState
    metrics: Mapping[str, float] = field(default_factory=dict)
    events: tuple[dp_accounting.DpEvent, ...] = ()


PrepareFn = Callable[..., Prepared]
"""``prepare(like, state, *, ctx, **inputs) -> Prepared`` (``like``: the model's parameters, for their shapes)."""
ApplyFn = Callable[[Cohort, Mapping[str, Any]], Mapped]
"""``apply(updates, values) -> Mapped``: pure, per row."""
FinishFn = Callable[..., Finished]
"""``finish(total, state, *, ctx, values) -> Finished``, with ``total`` the :class:`UserSum` (this step's tallies)."""
CutFn = Callable[..., StepResult]
"""``cut(total, state, *, ctx) -> StepResult`` whose updates are the one update after the sum."""


@dataclass(frozen=True)
class UserPart:
    """A per-user step's three parts (``apply`` None: the updates pass unchanged; ``finish`` None: nothing is
    read after the sum)."""

    prepare: PrepareFn
    apply: ApplyFn | None = None
    finish: FinishFn | None = None


@dataclass(frozen=True)
class Step:
    """A server step: ``init(params) -> state``; ``update(updates, state, *, ctx, **inputs)``; its ``phase``.

    ``update`` takes the names of ``inputs`` as keyword arguments and those of ``optional_inputs`` as keyword
    arguments defaulting to None; its result's ``outputs`` hold names of ``outputs`` only (not necessarily all of
    them every round). A step whose update emits DP events or steers a later step's release also has
    ``releases`` (see :class:`Releases`). A ``per_user`` step has its ``user`` parts (``update`` is their
    composition on a cohort) and the ``cut`` its ``cut`` from a :class:`UserSum`; build them with
    :func:`user_step`, :func:`cut_step` and :func:`after_sum_step`."""

    init: InitFn
    update: UpdateFn
    inputs: tuple[str, ...] = ()
    optional_inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    releases: ReleasesFn | None = None
    phase: Phase = field(kw_only=True)
    user: UserPart | None = field(default=None, kw_only=True)
    cut: CutFn | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        both = sorted(set(self.inputs) & set(self.optional_inputs))
        if both:
            raise ValueError(f"{both} declared both as required and as optional inputs")
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {self.phase!r}")
        if (self.user is not None) != (self.phase == "per_user") or (self.cut is not None) != (self.phase == "cut"):
            raise ValueError("a per_user step has its user parts and the cut its cut, no other step either")

    @property
    def reads(self) -> tuple[str, ...]:
        """Every name the step reads, required or optional."""
        return self.inputs + self.optional_inputs


def _no_state(params: Params) -> EmptyState:
    return EmptyState()


def after_sum_step(
    update: UpdateFn,
    *,
    init: InitFn | None = None,
    inputs: tuple[str, ...] = (),
    optional_inputs: tuple[str, ...] = (),
    outputs: tuple[str, ...] = (),
    releases: ReleasesFn | None = None,
) -> Step:
    """A step on the one update after the sum (noise, the center added back, a mirror mix, a server optimizer);
    without ``init`` it keeps nothing between rounds: its state is the empty :class:`EmptyState`, which
    ``update`` hands back as it got it."""
    return Step(init or _no_state, update, inputs, optional_inputs, outputs, releases, phase="after_sum")


def user_step(
    prepare: PrepareFn,
    *,
    apply: ApplyFn | None = None,
    finish: FinishFn | None = None,
    init: InitFn | None = None,
    inputs: tuple[str, ...] = (),
    optional_inputs: tuple[str, ...] = (),
    outputs: tuple[str, ...] = (),
    releases: ReleasesFn | None = None,
) -> Step:
    """A step on each user's update before the sum, from its three parts (see :class:`UserPart`); ``prepare``
    takes the declared names. Its ``update`` runs them on a cohort, the tallies summed over its rows."""
    part = UserPart(prepare, apply, finish)

    def update(updates: Cohort, state: StepState, *, ctx: RoundContext, **given: Any) -> StepResult:
        prepared = prepare(updates.like, state, ctx=ctx, **given)
        mapped = _apply(part, updates, prepared.values)
        finished = _finish(part, UserSum(mapped.updates, len(updates), mapped.tally_sums()), prepared, ctx)
        return StepResult(mapped.updates, finished.state, {**prepared.metrics, **finished.metrics}, finished.events,
                          prepared.outputs, mapped.diagnostics)

    return Step(init or _no_state, update, inputs, optional_inputs, outputs, releases, phase="per_user", user=part)


def cut_step(cut: CutFn, *, releases: ReleasesFn | None = None) -> Step:
    """The sum: ``cut(total, state, *, ctx)`` maps the users' :class:`UserSum` to the one update after it; its
    ``update`` is ``cut`` of a cohort's own rows. Keeps nothing between rounds."""

    def update(updates: Cohort, state: EmptyState, *, ctx: RoundContext) -> StepResult:
        return cut(UserSum(updates, len(updates)), state, ctx=ctx)

    return Step(_no_state, update, releases=releases, phase="cut", cut=cut)


def _apply(part: UserPart, updates: Cohort, values: Mapping[str, Any]) -> Mapped:
    return Mapped(updates) if part.apply is None else part.apply(updates, values)


def _finish(part: UserPart, total: UserSum, prepared: Prepared, ctx: RoundContext) -> Finished:
    if part.finish is None:
        return Finished(prepared.state)
    return part.finish(total, prepared.state, ctx=ctx, values=prepared.values)


_ROUND = "the round"


def _check_phases(named_steps: Sequence[tuple[str, Step]]) -> None:
    """Refuse a per-user step after the cut, an after-sum step before it and a second cut, naming the step."""
    cut = next((name for name, step in named_steps if step.phase == "cut"), None)
    seen_cut = False
    for name, step in named_steps:
        if step.phase == "round":
            raise ValueError(f"step {name!r} is a chain from the users' updates: only a chain of after-sum steps "
                             "may be a step of another chain")
        if step.phase == "cut":
            if seen_cut:
                raise ValueError(f"step {name!r} is a second sum: the chain already sums at step {cut!r}")
            seen_cut = True
        elif step.phase == "per_user" and seen_cut:
            raise ValueError(f"step {name!r} runs on each user's update (phase per_user), but comes after the sum "
                             f"(step {cut!r}): put it before {cut!r}")
        elif step.phase == "after_sum" and not seen_cut and any(s.phase != "after_sum" for _, s in named_steps):
            where = f"step {cut!r}" if cut else "a cut (aggregate)"
            raise ValueError(f"step {name!r} runs on the update after the sum (phase after_sum), but comes before "
                             f"the sum: put it after {where}")


def _check_names(named_steps: Sequence[tuple[str, Step]]) -> tuple[list[str], list[str]]:
    """Refuse a required input nobody provides before its step, and an output that shadows a name already
    provided; give the round inputs the chain reads, (required, optional)."""
    source = dict.fromkeys(ROUND_INPUTS, _ROUND)
    required: list[str] = []
    optional: list[str] = []
    for position, (name, step) in enumerate(named_steps):
        for needed in step.inputs:
            if needed in source:
                continue
            later = [other for other, s in named_steps[position + 1 :] if needed in s.outputs]
            hint = f"; step {later[0]!r} writes it later: put {name!r} after it" if later else ""
            raise ValueError(
                f"step {name!r} requires the input {needed!r}, which neither the round "
                f"({', '.join(ROUND_INPUTS)}) nor an earlier step provides{hint}"
            )
        for read in step.reads:
            if source.get(read) == _ROUND and read not in required + optional:
                (required if read in step.inputs else optional).append(read)
        for written in step.outputs:
            if written in source and written not in step.reads:
                raise ValueError(
                    f"step {name!r} writes {written!r}, which {source[written]} already provides: later steps "
                    f"would silently read {name!r}'s instead; rename the output, or declare {written!r} as an "
                    f"input of {name!r} if it is meant to replace it"
                )
            source[written] = f"step {name!r}"
    return required, [n for n in optional if n not in required]


def _declared(name: str, step: Step, available: Mapping[str, Any]) -> dict[str, Any]:
    """The names ``step`` reads among ``available``, refusing a required one missing."""
    missing = [n for n in step.inputs if n not in available]
    if missing:
        raise ValueError(f"step {name!r} requires {missing}, which no earlier step gave this round")
    return {n: available[n] for n in step.reads if n in available}


def _check_outputs(name: str, step: Step, outputs: Mapping[str, Any]) -> None:
    undeclared = sorted(set(outputs) - set(step.outputs))
    if undeclared:
        raise ValueError(f"step {name!r} gave the outputs {undeclared}, which it does not declare ({step.outputs})")


@dataclass(frozen=True)
class ChainPrep:
    """A chain's round prepared before any private update is seen: the round's context, the chain's state (the
    per-user steps' after their preparation), the ``values`` each per-user step's map reads (by step name: what a
    device would be sent), the names ``available`` to the steps after them (the round's inputs and the per-user
    steps' outputs) and the per-user steps' ``metrics`` (by step name)."""

    ctx: RoundContext
    state: ChainState
    values: Mapping[str, Mapping[str, Any]]
    available: Mapping[str, Any]
    outputs: Mapping[str, Any]
    metrics: Mapping[str, Mapping[str, float]]


@dataclass(frozen=True, kw_only=True)
class Chain(Step):
    """Steps composed in order (:func:`named_chain`), run whole by ``update`` or in the round's three parts:
    :meth:`prepare`, :meth:`apply` (where the updates are) and :meth:`finish` (from their sum)."""

    steps: tuple[tuple[str, Step], ...]

    @property
    def has_cut(self) -> bool:
        """Whether the chain sums the users' updates (has the cut)."""
        return any(step.phase == "cut" for _, step in self.steps)

    def prepare(self, like: Params, state: ChainState, *, ctx: RoundContext, **inputs: Any) -> ChainPrep:
        """The per-user steps' preparations in order (each reads the round's inputs and the earlier outputs);
        ``like``: the model's parameters (their names and shapes)."""
        unknown = sorted(set(inputs) - set(ROUND_INPUTS))
        if unknown:
            raise ValueError(f"a chain's inputs are the round's ({', '.join(ROUND_INPUTS)}), got {unknown}")
        new_state: ChainState = dict(state)
        values: dict[str, Mapping[str, Any]] = {}
        metrics: dict[str, Mapping[str, float]] = {}
        available = dict(inputs)
        outputs: dict[str, Any] = {}
        for name, step in self.steps:
            if step.user is None:
                continue
            prepared = step.user.prepare(like, state[name], ctx=ctx, **_declared(name, step, available))
            _check_outputs(name, step, prepared.outputs)
            new_state[name], values[name], metrics[name] = prepared.state, prepared.values, prepared.metrics
            available.update(prepared.outputs)
            outputs.update(prepared.outputs)
        return ChainPrep(ctx, new_state, values, available, outputs, metrics)

    def apply(self, updates: Cohort, prep: ChainPrep) -> Mapped:
        """The per-user steps' maps in order on the cohort's rows; tallies and diagnostics are ``name/tally``."""
        return self.map_users(updates, prep.values)

    def map_users(self, updates: Cohort, values: Mapping[str, Mapping[str, Any]]) -> Mapped:
        """:meth:`apply` from the per-user steps' ``values`` alone (by step name), as a device that was sent them
        runs it; a step whose map reads nothing (``apply`` None) needs no entry."""
        tallies: dict[str, torch.Tensor] = {}
        diagnostics: dict[str, float] = {}
        for name, step in self.steps:
            if step.user is None:
                continue
            mapped = _apply(step.user, updates, values.get(name, {}))
            updates = mapped.updates
            tallies.update({f"{name}/{k}": v for k, v in mapped.tallies.items()})
            diagnostics.update({f"{name}/{k}": v for k, v in mapped.diagnostics.items()})
        return Mapped(updates, tallies, diagnostics)

    def finish(
        self, total: UserSum | Any, prep: ChainPrep, *, diagnostics: Mapping[str, float] = {}  # noqa: B006
    ) -> StepResult:
        """The rest of the round from the users' sum ``total`` (its tallies ``name/tally``): the per-user steps'
        reads of their summed tallies, the cut, the steps after it (for a chain of after-sum steps, ``total`` is
        the one update they run on). ``diagnostics``: the per-user map's, put first."""
        ctx, updates = prep.ctx, total
        new_state: ChainState = dict(prep.state)
        metrics: dict[str, float] = {}
        all_diagnostics: dict[str, float] = dict(diagnostics)
        events: list = []
        available = dict(prep.available)
        chain_outputs = dict(prep.outputs)
        for name, step in self.steps:
            if step.user is not None:
                mine = {k.removeprefix(f"{name}/"): v for k, v in total.tallies.items() if k.startswith(f"{name}/")}
                part_total = UserSum(total.updates, total.users, mine)
                finished = _finish(step.user, part_total, Prepared(prep.state[name], prep.values[name]), ctx)
                result = StepResult(updates, finished.state, {**prep.metrics[name], **finished.metrics},
                                    finished.events)
            elif step.cut is not None:
                result = step.cut(total, prep.state[name], ctx=ctx)
            else:
                result = step.update(updates, prep.state[name], ctx=ctx, **_declared(name, step, available))
                _check_outputs(name, step, result.outputs)
            updates = result.updates
            new_state[name] = result.state
            metrics.update({f"{name}/{k}": v for k, v in result.metrics.items()})
            all_diagnostics.update({f"{name}/{k}": v for k, v in result.diagnostics.items()})
            events.extend(result.events)
            available.update(result.outputs)
            chain_outputs.update(result.outputs)
        return StepResult(updates, new_state, metrics, tuple(events), chain_outputs, all_diagnostics)


def named_chain(*named_steps: tuple[str, Step]) -> Chain:
    """Compose steps in order; the state is a dict by step name, metrics and diagnostics are ``name/metric``. The
    chain reads the round's inputs its steps read and declares every output of its steps. Its phase is
    ``after_sum`` when all its steps run after the sum (it may then be a step of another chain), else ``round``
    (it runs from the users' updates, and is no other chain's step)."""
    names = [name for name, _ in named_steps]
    if len(set(names)) != len(names):
        raise ValueError(f"step names must be unique, got {names}")
    _check_phases(named_steps)
    required, optional = _check_names(named_steps)
    outputs = tuple(dict.fromkeys(n for _, step in named_steps for n in step.outputs))
    after_sum_only = all(step.phase == "after_sum" for _, step in named_steps)

    def init(params: Params) -> ChainState:
        return {name: step.init(params) for name, step in named_steps}

    def update(updates: Any, state: ChainState, *, ctx: RoundContext, **inputs: Any) -> StepResult:
        if after_sum_only:
            return chain_step.finish(updates, chain_step.prepare({}, state, ctx=ctx, **inputs))
        prep = chain_step.prepare(updates.like, state, ctx=ctx, **inputs)
        mapped = chain_step.apply(updates, prep)
        result = chain_step.finish(UserSum(mapped.updates, len(updates), mapped.tally_sums()), prep,
                                   diagnostics=mapped.diagnostics)
        return result if chain_step.has_cut else replace(result, updates=mapped.updates)

    def releases(round_index: int, **inputs: Any) -> Releases:
        events: list = []
        declared: dict[str, Any] = dict(inputs)
        chain_outputs: dict[str, Any] = {}
        for _, step in named_steps:
            if step.releases is not None:
                release = step.releases(round_index, **{n: declared[n] for n in step.reads if n in declared})
                events.extend(release.events)
                declared.update(release.outputs)
                chain_outputs.update(release.outputs)
        return Releases(tuple(events), chain_outputs)

    chain_step = Chain(init, update, tuple(required), tuple(optional), outputs, releases,
                       phase="after_sum" if after_sum_only else "round", steps=tuple(named_steps))
    return chain_step


def chain(*steps: Step) -> Chain:
    """Compose unnamed steps; they are named by position (``0``, ``1``, ...)."""
    return named_chain(*((str(i), step) for i, step in enumerate(steps)))
