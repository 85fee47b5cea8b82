"""The round cut at the sum (docs/design.md §9): for every recipe combination the in-process round
(:meth:`StrategyCore.aggregate`) is the per-user part, summed, then finished from the sum, so a transport that sums
elsewhere (workers, devices, a secure sum) releases the same round."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fedpub.config import StrategyConfig
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.events import PoissonSampling
from fedpub.round_driver import RoundDriver
from fedpub.strategies.compose import build_strategy
from fedpub.strategy import RoundOutcome, StrategyCore, usable_rows

SHAPES = {"w": (6, 4), "b": (4,)}
POPULATION, COHORT, ROUNDS, Z = 100, 5, 6, 0.9

RECIPES = {
    "dp_fedavg_momentum": {"server_optimizer": {"momentum": 0.9}},
    "dope_extended_adadps_server_mirror_budget_adam": {
        "name": "dope", "recenter": {"extended": True}, "precondition": {"placement": "server"}, "mirror": {},
        "budget_schedule": {"boosted_rounds": 1, "boosted_noise_multiplier": 0.5},
        "server_optimizer": {"name": "adam", "lr": 0.1},
    },
    "ppsgd": {"name": "ppsgd", "public_schedule": {"budget_growth": 0.5, "clip_decay": 0.2, "noise_reference": "run"}},
    "adaptive_clip_adadps_client": {"name": "adadps", "adaptive_clip": {"count_noise_std": 1.0}},
    "token_frequency_server": {"name": "adadps", "precondition": {"source": "token_frequency", "placement": "server"}},
    "token_frequency_client": {"name": "adadps", "precondition": {"source": "token_frequency", "placement": "client"}},
}


def _tree(seed: int, scale: float = 1.0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: scale * torch.randn(s, generator=g) for k, s in SHAPES.items()}


def _core(recipe: str) -> StrategyCore:
    side = {k: v.abs() + 0.5 for k, v in _tree(99).items()} if "token_frequency" in recipe else None
    config = StrategyConfig(**{"clip_norm": 1.0, "noise_multiplier": Z, **RECIPES[recipe]})
    return build_strategy(config, sampling=PoissonSampling(COHORT / POPULATION), population=POPULATION,
                          noise_multiplier=Z, seed=4, rounds=ROUNDS, side_information=side)


def _round(seed: int) -> tuple[list[dict[str, torch.Tensor]], list[dict[str, torch.Tensor]]]:
    """Four private updates of several norms (one unusable: NaN) and three public ones."""
    private = [_tree(seed + i, scale) for i, scale in enumerate((0.3, 2.0, 5.0, 0.9))]
    private.append({k: torch.full(s, float("nan")) for k, s in SHAPES.items()})
    return private, [_tree(seed + 50 + i, 0.2) for i in range(3)]


def _assert_same(a: Any, b: Any, what: str, exact: bool) -> None:
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b) if exact else torch.allclose(a, b, rtol=1e-5, atol=1e-6), what
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for k in a:
            _assert_same(a[k], b[k], f"{what}[{k}]", exact)
    elif isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{what}[{i}]", exact)
    elif isinstance(a, float) and not exact:
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6, nan_ok=True), what
    else:
        assert a == b or (a != a and b != b), f"{what}: {a!r} != {b!r}"


def _assert_outcomes(split: RoundOutcome, whole: RoundOutcome, exact: bool) -> None:
    _assert_same(split.params, whole.params, "params", exact)
    _assert_same(dict(split.state), dict(whole.state), "state", exact)
    _assert_same(dict(split.metrics), dict(whole.metrics), "metrics", exact)
    assert split.event == whole.event
    assert split.diagnostics["cohort_failed"] == whole.diagnostics["cohort_failed"] == 2.0  # the NaN, one missing


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_the_in_process_round_is_the_per_user_part_summed_then_finished_from_the_sum(recipe):
    core = _core(recipe)
    params = _tree(0)
    state = core.init(params)
    for t in range(3):
        private, public = _round(10 * t)
        whole = core.aggregate(params, private, state, t, sampled=6, public_updates=public)
        prep = core.prepare_round(params, state, t, sampled=6, public_updates=public)
        rows = usable_rows(private, params)
        batched = core.per_user(rows, prep)
        same_order = core.finish_from_sum(prep, batched.updates.sum(), len(rows), batched.tally_sums())
        _assert_outcomes(same_order, whole, exact=True)

        one_by_one = [core.per_user(usable_rows([u], params), prep) for u in private]
        total = {k: sum(m.updates.sum()[k] for m in one_by_one) for k in SHAPES}
        tallies = {name: sum(m.tally_sums()[name] for m in one_by_one) for name in batched.tallies}
        users = sum(len(m.updates) for m in one_by_one)
        _assert_outcomes(core.finish_from_sum(prep, total, users, tallies), whole, exact=False)
        params, state = whole.params, whole.state


def test_the_round_driver_finishes_a_round_from_the_sum_as_from_the_replies():
    core = _core("adaptive_clip_adadps_client")
    params = _tree(0)
    drivers = [RoundDriver(core, UserLevelAccountant("pld"), private_ids=[f"u{i}" for i in range(100)],
                           public_ids=["p0", "p1", "p2"], delta=1e-5) for _ in range(2)]
    plan = drivers[0].plan(0, core.init(params))
    private, public = _round(0)
    replies = dict(zip(plan.private_cohort, private))
    public_replies = dict(zip(plan.public_cohort, public))
    whole = drivers[0].finish(plan, params, core.init(params), replies, public_replies)
    prepared = drivers[1].prepare(plan, params, core.init(params), public_replies)
    mapped = core.per_user(usable_rows(list(replies.values()), params), prepared.prep)
    split = drivers[1].finish_from_sum(prepared, mapped.updates.sum(), len(mapped.updates), mapped.tally_sums())
    _assert_same(split.params, whole.params, "params", exact=True)
    assert split.metrics == whole.metrics and split.event == whole.event
    assert drivers[0].accountant.epsilon(1e-5) == drivers[1].accountant.epsilon(1e-5) > 0
