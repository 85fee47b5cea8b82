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
(calibration prices it for any noise multiplier; DESIGN.md §3, §5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import dp_accounting

from fedpub.types import ROUND_INPUTS, Params, RoundContext, StepResult, StepState

InitFn = Callable[[Params], StepState]
UpdateFn = Callable[..., StepResult]
ChainState = dict[str, StepState]
"""A chain's state: each step's state by the step's name."""


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
class Step:
    """A server step: ``init(params) -> state``; ``update(updates, state, *, ctx, **inputs)``.

    ``update`` takes the names of ``inputs`` as keyword arguments and those of ``optional_inputs`` as keyword
    arguments defaulting to None; its result's ``outputs`` hold names of ``outputs`` only (not necessarily all of
    them every round). A step whose update emits DP events or steers a later step's release also has
    ``releases`` (see :class:`Releases`)."""

    init: InitFn
    update: UpdateFn
    inputs: tuple[str, ...] = ()
    optional_inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    releases: ReleasesFn | None = None

    def __post_init__(self) -> None:
        both = sorted(set(self.inputs) & set(self.optional_inputs))
        if both:
            raise ValueError(f"{both} declared both as required and as optional inputs")

    @property
    def reads(self) -> tuple[str, ...]:
        """Every name the step reads, required or optional."""
        return self.inputs + self.optional_inputs


def _no_state(params: Params) -> EmptyState:
    return EmptyState()


def stateless(
    update: UpdateFn,
    *,
    inputs: tuple[str, ...] = (),
    optional_inputs: tuple[str, ...] = (),
    outputs: tuple[str, ...] = (),
    releases: ReleasesFn | None = None,
) -> Step:
    """The step of ``update``, which keeps nothing between rounds: its state is the empty :class:`EmptyState`,
    which ``update`` hands back as it got it."""
    return Step(_no_state, update, inputs, optional_inputs, outputs, releases)


_ROUND = "the round"


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


def _run(name: str, step: Step, updates: Any, state: StepState, ctx: RoundContext,
         available: Mapping[str, Any]) -> StepResult:
    """``step.update`` with only the names the step declares, its outputs checked against its declaration."""
    missing = [n for n in step.inputs if n not in available]
    if missing:
        raise ValueError(f"step {name!r} requires {missing}, which no earlier step gave this round")
    result = step.update(updates, state, ctx=ctx, **{n: available[n] for n in step.reads if n in available})
    undeclared = sorted(set(result.outputs) - set(step.outputs))
    if undeclared:
        raise ValueError(f"step {name!r} gave the outputs {undeclared}, which it does not declare ({step.outputs})")
    return result


def named_chain(*named_steps: tuple[str, Step]) -> Step:
    """Compose steps in order; the state is a dict by step name, metrics and diagnostics are ``name/metric``. The chain reads
    the round's inputs its steps read and declares every output of its steps."""
    names = [name for name, _ in named_steps]
    if len(set(names)) != len(names):
        raise ValueError(f"step names must be unique, got {names}")
    required, optional = _check_names(named_steps)
    outputs = tuple(dict.fromkeys(n for _, step in named_steps for n in step.outputs))

    def init(params: Params) -> ChainState:
        return {name: step.init(params) for name, step in named_steps}

    def update(updates: Any, state: ChainState, *, ctx: RoundContext, **inputs: Any) -> StepResult:
        unknown = sorted(set(inputs) - set(ROUND_INPUTS))
        if unknown:
            raise ValueError(f"a chain's inputs are the round's ({', '.join(ROUND_INPUTS)}), got {unknown}")
        new_state: ChainState = {}
        metrics: dict[str, float] = {}
        diagnostics: dict[str, float] = {}
        events: list = []
        available = dict(inputs)
        chain_outputs: dict[str, Any] = {}
        for name, step in named_steps:
            result = _run(name, step, updates, state[name], ctx, available)
            updates = result.updates
            new_state[name] = result.state
            metrics.update({f"{name}/{k}": v for k, v in result.metrics.items()})
            diagnostics.update({f"{name}/{k}": v for k, v in result.diagnostics.items()})
            events.extend(result.events)
            available.update(result.outputs)
            chain_outputs.update(result.outputs)
        return StepResult(updates, new_state, metrics, tuple(events), chain_outputs, diagnostics)

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

    return Step(init, update, tuple(required), tuple(optional), outputs, releases)


def chain(*steps: Step) -> Step:
    """Compose unnamed steps; they are named by position (``0``, ``1``, ...)."""
    return named_chain(*((str(i), step) for i, step in enumerate(steps)))
