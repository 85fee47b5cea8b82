"""Server steps as pairs of pure functions, composed optax-style.

A :class:`Step` is ``init(params) -> state`` and
``update(updates, state, *, ctx, **inputs) -> StepResult``. Nothing is kept on the step object;
the state goes in and the new state comes out. A step that keeps nothing is :func:`stateless`: its state
is the empty :class:`EmptyState`. :func:`chain` runs steps in order, feeding each
step's ``outputs`` to the later steps as keyword inputs; :func:`named_chain` does the same with
named states and metrics prefixed by the step's name. (After optax's ``GradientTransformation``.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from fedpub.types import Params, RoundContext, StepResult, StepState

InitFn = Callable[[Params], StepState]
UpdateFn = Callable[..., StepResult]
ChainState = dict[str, StepState]
"""A chain's state: each step's state by the step's name."""


class EmptyState(TypedDict):
    """The state of a step that keeps nothing between rounds (``{}``)."""


@dataclass(frozen=True)
class Step:
    """A server step: ``init(params) -> state``; ``update(updates, state, *, ctx, **inputs)``."""

    init: InitFn
    update: UpdateFn


def _no_state(params: Params) -> EmptyState:
    return EmptyState()


def stateless(update: UpdateFn) -> Step:
    """The step of ``update``, which keeps nothing between rounds: its state is the empty :class:`EmptyState`,
    which ``update`` hands back as it got it."""
    return Step(_no_state, update)


def named_chain(*named_steps: tuple[str, Step]) -> Step:
    """Compose steps in order; the state is a dict by step name, metrics are ``name/metric``."""
    names = [name for name, _ in named_steps]
    if len(set(names)) != len(names):
        raise ValueError(f"step names must be unique, got {names}")

    def init(params: Params) -> ChainState:
        return {name: step.init(params) for name, step in named_steps}

    def update(updates: Any, state: ChainState, *, ctx: RoundContext, **inputs: Any) -> StepResult:
        new_state: ChainState = {}
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

    return Step(init, update)


def chain(*steps: Step) -> Step:
    """Compose unnamed steps; they are named by position (``0``, ``1``, ...)."""
    return named_chain(*((str(i), step) for i, step in enumerate(steps)))
