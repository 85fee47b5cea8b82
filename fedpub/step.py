"""Server steps as pairs of pure functions, composed optax-style.

A :class:`Step` is ``init(params) -> state`` and
``update(updates, state, *, ctx, **inputs) -> StepResult``. Nothing is kept on the step object;
the state goes in and the new state comes out. :func:`chain` runs steps in order, feeding each
step's ``outputs`` to the later steps as keyword inputs; :func:`named_chain` does the same with
named states and metrics prefixed by the step's name. (After optax's ``GradientTransformation``.)

A step that releases something private also *declares* it: ``releases(round_index, **inputs)`` says, before
any tensor exists, which DP events its ``update`` will emit in that round (and which declared values, such as
the round's noise multiplier, it hands the later steps' declarations, as ``update`` hands its ``outputs``).
The chain's declaration is its steps' in order, so a recipe's planned run is known from its steps alone
(calibration prices it for any noise multiplier; DESIGN.md §3, §5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dp_accounting

from fedpub.types import Params, RoundContext, StepResult, StepState

InitFn = Callable[[Params], StepState]
UpdateFn = Callable[..., StepResult]


@dataclass(frozen=True)
class Releases:
    """What a step declares for one round: the DP events its ``update`` will emit, and the declared values
    (by output name) later steps' declarations receive as keyword inputs."""

    events: tuple[dp_accounting.DpEvent, ...] = ()
    outputs: Mapping[str, Any] = field(default_factory=dict)


ReleasesFn = Callable[..., Releases]
"""``releases(round_index, **inputs) -> Releases``: the declaration of a round, computed without tensors."""


@dataclass(frozen=True)
class Step:
    """A server step: ``init(params) -> state``; ``update(updates, state, *, ctx, **inputs)``; and, for a step
    whose update emits DP events or steers a later step's release, ``releases(round_index, **inputs)``."""

    init: InitFn
    update: UpdateFn
    releases: ReleasesFn | None = None


def named_chain(*named_steps: tuple[str, Step]) -> Step:
    """Compose steps in order; the state is a dict by step name, metrics are ``name/metric``."""
    names = [name for name, _ in named_steps]
    if len(set(names)) != len(names):
        raise ValueError(f"step names must be unique, got {names}")

    def init(params: Params) -> dict[str, StepState]:
        return {name: step.init(params) for name, step in named_steps}

    def update(
        updates: Any, state: dict[str, StepState], *, ctx: RoundContext, **inputs: Any
    ) -> StepResult:
        new_state: dict[str, StepState] = {}
        metrics: dict[str, float] = {}
        events: list = []
        outputs: dict[str, Any] = {}
        for name, step in named_steps:
            result = step.update(updates, state[name], ctx=ctx, **{**inputs, **outputs})
            updates = result.updates
            new_state[name] = result.state
            metrics.update({f"{name}/{k}": v for k, v in result.metrics.items()})
            events.extend(result.events)
            outputs.update(result.outputs)
        return StepResult(updates, new_state, metrics, tuple(events), outputs)

    def releases(round_index: int, **inputs: Any) -> Releases:
        events: list = []
        outputs: dict[str, Any] = {}
        for _, step in named_steps:
            if step.releases is not None:
                declared = step.releases(round_index, **{**inputs, **outputs})
                events.extend(declared.events)
                outputs.update(declared.outputs)
        return Releases(tuple(events), outputs)

    return Step(init, update, releases)


def chain(*steps: Step) -> Step:
    """Compose unnamed steps; they are named by position (``0``, ``1``, ...)."""
    return named_chain(*((str(i), step) for i, step in enumerate(steps)))
