"""The contract every server step keeps, checked on every step factory of ``fedpub/steps/``.

:data:`CASES` registers a small valid instance of each factory (several where its configurations differ), with
the updates and inputs to run it on; a test fails when a factory of ``fedpub/steps/`` has no case. Each case is
checked for: names declared as its ``update`` (a per-user step's ``prepare``) takes them; the DP events it declares
(``releases``) are the ones its ``update`` emits; a per-user step's map of one user alone is that user's row of the
cohort's map (it can run wherever the update is), its tallies summing to the cohort's; a chain that puts a step in
the wrong phase is refused when built, naming the step; outputs within the declared ones and metrics that are
floats; the update keeps the parameters' shapes; inputs, parameters and state not mutated; two fresh instances
give the same round (deterministic from the seed); the state after a round survives ``torch.save``/``torch.load``
(as checkpoints do) and the next round from the reloaded state equals the next round from the original.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import io
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import torch

import fedpub.steps
from fedpub.privacy.banded_factorization import banded_square_root
from fedpub.cohort_updates import Cohort
from fedpub.step import Mapped, Step, named_chain
from fedpub.steps.adaptive_clip import adaptive_clip
from fedpub.steps.aggregate import aggregate
from fedpub.steps.banded_noise import banded_noise
from fedpub.steps.budget_schedule import budget_schedule
from fedpub.steps.clip import clip
from fedpub.steps.gaussian_noise import gaussian_noise
from fedpub.steps.mirror import mirror, quadratic_mirror
from fedpub.steps.precondition import precondition
from fedpub.steps.project import project, project_noise, top_subspace
from fedpub.steps.public_schedule import public_schedule
from fedpub.steps.recenter import add_center, recenter
from fedpub.steps.server_opt import server_adam, server_sgd
from fedpub.steps.tree_noise import tree_noise
from fedpub.types import Params, RoundContext
from tests.steps.cohorts import cohort

SCHEDULE = {"budget_growth": 0.44, "clip_decay": 0.25, "noise_test_factor": 1.0, "clip_test_factor": 1.0}


def _full(params: Params, value: float) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(v, value) for k, v in params.items()}


def _public(params: Params) -> dict[str, Any]:
    """The round's public inputs: three public updates and their mean."""
    g = torch.Generator().manual_seed(5)
    stacked = {k: torch.randn(3, *v.shape, generator=g) for k, v in params.items()}
    return {"public_updates": cohort(stacked), "public_mean": {k: v.mean(dim=0) for k, v in stacked.items()}}


def _spd(size: int) -> torch.Tensor:
    """A fixed symmetric positive definite matrix (an inverse Hessian)."""
    a = torch.randn(size, size, generator=torch.Generator().manual_seed(2))
    return a @ a.T / size + torch.eye(size)


@dataclass(frozen=True)
class Case:
    """``make()`` builds the step afresh (the same seed each time) from ``factory``; it runs on the cohort (the
    steps of phase ``per_user`` and the cut) or on one mean update (``after_sum``), as ``phase`` says it declares,
    with ``inputs(params)`` as its keyword inputs, in a round with ``context`` changed from the default."""

    factory: Callable[..., Step]
    make: Callable[[], Step]
    phase: Literal["per_user", "cut", "after_sum"]
    inputs: Callable[[Params], dict[str, Any]] = lambda params: {}
    context: dict[str, Any] = field(default_factory=dict)


CASES: dict[str, Case] = {
    "adaptive_clip": Case(adaptive_clip, lambda: adaptive_clip(1.0, 0.5, 0.2, 1.0, seed=3), "per_user"),
    "aggregate": Case(aggregate, aggregate, "cut"),
    "banded_noise": Case(banded_noise, lambda: banded_noise(banded_square_root(8, 3), 1.1, 7), "after_sum",
                         lambda params: {"clip_norm": 0.5, "noise_multiplier": 0.9}),
    "budget_schedule": Case(budget_schedule, lambda: budget_schedule(range(2), 0.5), "per_user"),
    "clip": Case(clip, lambda: clip(1.0), "per_user"),
    "gaussian_noise": Case(
        gaussian_noise, lambda: gaussian_noise(1.3, seed=7), "after_sum",
        lambda params: {"clip_norm": 0.5, "noise_multiplier": 0.9},
    ),
    "mirror": Case(mirror, lambda: mirror(10, 0.2), "after_sum", lambda params: {"public_mean": _full(params, 1.0)},
                   {"round": 3}),
    "quadratic_mirror": Case(quadratic_mirror, lambda: quadratic_mirror(_spd(15)), "after_sum"),  # w (4, 3), b (3)
    "precondition_server": Case(precondition, lambda: precondition("server"), "per_user", _public),
    "precondition_client": Case(precondition, lambda: precondition("client"), "per_user",
                                lambda params: {"public_updates": _public(params)["public_updates"]}),
    "precondition_static": Case(
        precondition, lambda: precondition("server", static={"w": torch.full((4, 3), 2.0), "b": torch.ones(3)}),
        "per_user", _public,
    ),
    "project": Case(project, lambda: project(2), "per_user",
                    lambda params: {"public_updates": _public(params)["public_updates"]}),
    "project_noise": Case(project_noise, project_noise, "after_sum",
                          lambda params: {"basis": top_subspace(_public(params)["public_updates"], 2)}),
    "public_schedule": Case(public_schedule, lambda: public_schedule(1.0, 1.2, **SCHEDULE), "per_user",
                            lambda params: {"public_mean": _full(params, 0.01)}),
    "recenter": Case(recenter, lambda: recenter(0.5), "per_user", lambda params: {"public_mean": _full(params, 1.0)}),
    "add_center": Case(
        add_center, lambda: add_center(extended=True), "after_sum",
        lambda params: {"center": _full(params, 0.5), "public_mean": _full(params, 1.0)}, {"num_public": 3},
    ),
    "server_sgd": Case(server_sgd, lambda: server_sgd(1.0), "after_sum"),
    "server_sgd_momentum": Case(server_sgd, lambda: server_sgd(0.5, momentum=0.9), "after_sum"),
    "server_adam": Case(server_adam, lambda: server_adam(0.1), "after_sum"),
    "tree_noise": Case(tree_noise, lambda: tree_noise(1.1, seed=7, rounds_per_tree=4, rounds=8), "after_sum",
                       lambda params: {"clip_norm": 0.5}),
}


def _step_factories() -> dict[str, Callable[..., Step]]:
    """Every public function of a ``fedpub.steps`` module that returns a Step, by qualified name."""
    factories = {}
    for module_info in pkgutil.iter_modules(fedpub.steps.__path__):
        module = importlib.import_module(f"fedpub.steps.{module_info.name}")
        for name, value in vars(module).items():
            if (inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
                    and inspect.signature(value).return_annotation in ("Step", Step)):
                factories[f"{module.__name__}.{name}"] = value
    return factories


def test_every_step_factory_has_a_contract_case():
    factories = _step_factories()
    assert len(factories) >= 12  # the scan finds the factories (a broken scan would pass the next line vacuously)
    registered = {case.factory for case in CASES.values()}
    missing = sorted(name for name, factory in factories.items() if factory not in registered)
    assert not missing, f"step factories without a case in CASES: {missing}"


def _snapshot(value: Any) -> Any:
    """A copy to compare against (a cohort's: its rows stacked and scaled)."""
    if isinstance(value, Cohort):
        return value.stacked()
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snapshot(v) for v in value]
    return value


def _assert_equal(a: Any, b: Any, what: str) -> None:
    if isinstance(a, Cohort) or isinstance(b, Cohort):
        _assert_equal(_snapshot(a), _snapshot(b), what)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), f"{what} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{what}: keys differ"
        for k in a:
            _assert_equal(a[k], b[k], f"{what}[{k}]")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{what}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_equal(x, y, f"{what}[{i}]")
    else:
        assert a == b, f"{what}: {a!r} != {b!r}"


def _save_load(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)  # as simulations.run.run_dir loads checkpoints


def _round(case: Case, params: Params, stacked: dict[str, torch.Tensor], ctx: RoundContext):
    updates = _full(params, 0.5) if case.phase == "after_sum" else cohort(stacked)
    return updates, case.inputs(params), dataclasses.replace(ctx, **case.context)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_declared_names_are_the_keyword_inputs_update_takes(case):
    step = case.make()
    assert step.phase == case.phase
    takes = step.user.prepare if step.user is not None else step.cut if step.cut is not None else step.update
    parameters = inspect.signature(takes).parameters.values()
    assert not [p for p in parameters if p.kind is p.VAR_KEYWORD], "update takes **kwargs: it would hide names"
    keywords = {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY and p.name != "ctx"}
    assert set(keywords) == set(step.reads)
    assert {n for n, default in keywords.items() if default is inspect.Parameter.empty} == set(step.inputs)
    assert all(keywords[n] is None for n in step.optional_inputs)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_step_keeps_the_contract(case, params, stacked, ctx):
    updates, inputs, ctx = _round(case, params, stacked, ctx)
    step = case.make()
    assert set(step.inputs) <= set(inputs) <= set(step.reads), "the case must give what the step declares"
    before = {"updates": _snapshot(updates), "params": _snapshot(params), "inputs": _snapshot(inputs)}
    state = step.init(params)
    state_before = _snapshot(state)
    first = step.update(updates, state, ctx=ctx, **inputs)

    assert set(first.outputs) <= set(step.outputs)
    assert all(type(v) is float for v in first.metrics.values()), first.metrics
    out = _snapshot(first.updates)
    rows = (len(updates),) if isinstance(first.updates, Cohort) else ()
    assert {k: v.shape for k, v in out.items()} == {k: torch.Size(rows + v.shape) for k, v in params.items()}
    _assert_equal({"updates": updates, "params": params, "inputs": inputs}, before, "the inputs")
    _assert_equal(state, state_before, "the input state")

    again = case.make()
    replay = again.update(updates, again.init(params), ctx=ctx, **inputs)
    _assert_equal(first.updates, replay.updates, "a second run with the same seed")
    _assert_equal(first.state, replay.state, "the state of a second run with the same seed")

    second = step.update(updates, first.state, ctx=ctx, **inputs)
    second_reloaded = step.update(updates, _save_load(first.state), ctx=ctx, **inputs)
    _assert_equal(second.updates, second_reloaded.updates, "the round after a save/load")
    _assert_equal(second.state, second_reloaded.state, "the state after a save/load")


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_declared_releases_are_the_events_the_update_emits(case, params, stacked, ctx):
    """What calibration and the budget check price (the declaration) is what the round composes (the events)."""
    updates, inputs, ctx = _round(case, params, stacked, ctx)
    step = case.make()
    emitted = step.update(updates, step.init(params), ctx=ctx, **inputs).events
    if step.releases is None:
        assert emitted == (), "a step that emits DP events must declare them"
        return
    accepted = inspect.signature(step.releases).parameters
    declared = step.releases(ctx.round, **{n: v for n, v in inputs.items() if n in accepted})
    assert declared.events == tuple(emitted)


PER_USER = {name: case for name, case in CASES.items() if case.phase == "per_user"}


@pytest.mark.parametrize("case", PER_USER.values(), ids=PER_USER.keys())
def test_a_per_user_map_of_one_user_alone_is_its_row_of_the_cohorts(case, params, stacked, ctx):
    """The per-user part runs wherever an update is: one user's update mapped alone (a cohort of one row) is
    that user's row of the whole cohort's map, and its tallies sum to the cohort's."""
    updates, inputs, ctx = _round(case, params, stacked, ctx)
    step = case.make()
    prepared = step.user.prepare(params, step.init(params), ctx=ctx, **inputs)
    apply = step.user.apply or (lambda rows, values: Mapped(rows))
    whole = apply(updates, prepared.values)
    rows = _snapshot(whole.updates)
    for k in range(len(updates)):
        alone = apply(cohort({name: v[k : k + 1] for name, v in stacked.items()}), prepared.values)
        _assert_equal(_snapshot(alone.updates), {name: v[k : k + 1] for name, v in rows.items()}, f"user {k}")
        for tally, values in whole.tallies.items():
            assert torch.equal(alone.tallies[tally], values[k : k + 1]), f"user {k}'s tally {tally}"
    result = step.update(updates, step.init(params), ctx=ctx, **inputs)
    _assert_equal(result.updates, whole.updates, "update, the composition of the parts")


_MISORDERED = {
    "mirror before the sum": ((("clip", clip(1.0)), ("mirror", mirror(10)), ("aggregate", aggregate())), "mirror"),
    "a clip after the sum": ((("aggregate", aggregate()), ("clip", clip(1.0))), "clip"),
    "noise with no sum": ((("clip", clip(1.0)), ("noise", gaussian_noise(1.0, seed=0))), "noise"),
    "two sums": ((("clip", clip(1.0)), ("aggregate", aggregate()), ("again", aggregate())), "again"),
    "a round inside a chain": ((("inner", named_chain(("clip", clip(1.0)), ("aggregate", aggregate()))),), "inner"),
}


@pytest.mark.parametrize("steps, culprit", _MISORDERED.values(), ids=_MISORDERED.keys())
def test_a_chain_with_a_step_in_the_wrong_phase_is_refused_naming_it(steps, culprit):
    with pytest.raises(ValueError, match=f"step '{culprit}'"):
        named_chain(*steps)


def test_every_step_declares_a_phase_the_chain_orders():
    assert {case.make().phase for case in CASES.values()} == {"per_user", "cut", "after_sum"}
    ordered = named_chain(("recenter", recenter()), ("clip", clip(1.0)), ("aggregate", aggregate()),
                          ("noise", gaussian_noise(1.0, seed=0)), ("add_center", add_center()), ("mirror", mirror(3)))
    assert ordered.phase == "round" and ordered.has_cut
