"""The contract every server step must keep; each step's tests call :func:`assert_step_contract`."""

from __future__ import annotations

import io
from typing import Any

import torch

from fedpub.cohort_updates import Cohort
from fedpub.step import Step
from fedpub.types import Params, RoundContext


def _clone(value: Any) -> Any:
    """A copy to compare against (a cohort's: its rows stacked, scaled)."""
    if isinstance(value, Cohort):
        return value.stacked()
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def _assert_equal(a: Any, b: Any, what: str) -> None:
    if isinstance(a, Cohort) or isinstance(b, Cohort):
        _assert_equal(_clone(a), _clone(b), what)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), f"{what} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{what}: keys differ"
        for k in a:
            _assert_equal(a[k], b[k], f"{what}[{k}]")
    else:
        assert a == b, f"{what}: {a!r} != {b!r}"


def _save_load(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def assert_step_contract(
    make_step: Any,
    params: Params,
    updates: Cohort | dict[str, torch.Tensor],
    ctx: RoundContext,
    expected_shapes: dict[str, torch.Size],
    **inputs: Any,
) -> None:
    """``make_step()`` builds the step afresh (same seed each time).

    Checks: output keys and shapes; inputs not mutated; two fresh instances give identical
    outputs (deterministic for a seed); the state after one round survives torch.save/load and
    the next round from the reloaded state equals the next round from the original one.
    """
    step: Step = make_step()
    before_updates, before_params = _clone(updates), _clone(params)
    state = step.init(params)
    state_before = _clone(state)
    first = step.update(updates, state, ctx=ctx, **inputs)

    out = _clone(first.updates)
    assert set(out) == set(expected_shapes)
    for k, shape in expected_shapes.items():
        assert out[k].shape == shape, f"{k}: {out[k].shape} != {shape}"
    _assert_equal(updates, before_updates, "input updates")
    _assert_equal(params, before_params, "params")
    _assert_equal(state, state_before, "input state")

    again = make_step()
    replay = again.update(updates, again.init(params), ctx=ctx, **inputs)
    _assert_equal(first.updates, replay.updates, "a second run with the same seed")

    reloaded = _save_load(first.state)
    second = step.update(updates, first.state, ctx=ctx, **inputs)
    second_reloaded = step.update(updates, reloaded, ctx=ctx, **inputs)
    _assert_equal(second.updates, second_reloaded.updates, "the round after a save/load")
