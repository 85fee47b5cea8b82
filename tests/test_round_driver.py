"""The round driver (fedpub/round_driver.py) that every backend runs: what it plans, the one budget rule (the
round's actual event, priced before release), the failure streak, and the populations it refuses."""

from __future__ import annotations

import dp_accounting
import pytest
import torch

from fedpub.config import StrategyConfig
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.events import PoissonSampling
from fedpub.round_driver import PublicUpdateRefused, RoundDriver
from fedpub.strategies.compose import build_strategy

SHAPES = {"w": (6, 4), "b": (4,)}
POPULATION, COHORT, ROUNDS, Z, DELTA = 40, 8, 6, 0.9, 1e-5
PRIVATE = [f"u{i:02d}" for i in range(POPULATION)]
PUBLIC = ["p0", "p1", "p2"]


def _core(**overrides):
    config = StrategyConfig(**{"clip_norm": 1.0, "noise_multiplier": Z, **overrides})
    return build_strategy(config, sampling=PoissonSampling(COHORT / POPULATION), population=POPULATION,
                          noise_multiplier=Z, seed=7, rounds=ROUNDS)


def _driver(core, **kwargs):
    accountant = UserLevelAccountant("pld", dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    return RoundDriver(core, accountant, private_ids=PRIVATE, public_ids=kwargs.pop("public_ids", ()), delta=DELTA,
                       **kwargs)


def _params():
    return {k: torch.zeros(s) for k, s in SHAPES.items()}


def _update(seed: int):
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(s, generator=g) for k, s in SHAPES.items()}


def test_the_plan_is_the_cores_cohorts_and_the_client_payloads():
    core = _core(name="adadps", public_clients_per_round=2)
    driver = _driver(core, public_ids=PUBLIC)
    params = _params()
    state = core.init(params)
    plan = driver.plan(3, state)
    assert list(plan.private_cohort) == core.sample_cohort(PRIVATE, 3)
    assert list(plan.public_cohort) == core.sample_public_cohort(PUBLIC, 3) and len(plan.public_cohort) == 2
    assert plan.private_payloads == {}  # no public statistics yet
    outcome = driver.finish(plan, params, state, {c: _update(i) for i, c in enumerate(plan.private_cohort)},
                            {c: _update(100 + i) for i, c in enumerate(plan.public_cohort)})
    later = driver.plan(4, outcome.state)
    assert set(later.private_payloads) == {"preconditioner"} and later.payloads(public=False) is later.private_payloads
    assert later.public_payloads == {}  # public users train plainly when A comes from them


def test_replies_of_users_not_planned_are_ignored_and_missing_ones_count_as_failed():
    core = _core()
    driver = _driver(core)
    params, state = _params(), core.init(_params())
    plan = driver.plan(0, state)
    answered = {c: _update(i) for i, c in enumerate(plan.private_cohort[1:])}
    outcome = driver.finish(plan, params, state, {**answered, "intruder": _update(99)})
    assert outcome.diagnostics["cohort_sampled"] == len(plan.private_cohort)
    assert outcome.diagnostics["cohort_failed"] == 1
    assert driver.accountant.rounds == 1


def test_the_budget_prices_each_rounds_actual_event_and_releases_nothing_past_it():
    """A budget schedule's boosted round costs more than round 0's: the driver prices that round itself."""
    core = _core(budget_schedule={"boosted_rounds": 1, "boosted_noise_multiplier": 0.3, "position": "last"})
    params = _params()
    plain = dp_accounting.PoissonSampledDpEvent(COHORT / POPULATION, dp_accounting.GaussianDpEvent(Z))
    fresh = UserLevelAccountant("pld", dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    fresh.compose(plain, ROUNDS - 1)
    budget = fresh.epsilon(DELTA) * 1.01  # room for every plain round, not for the boosted last one
    driver = _driver(core, budget_epsilon=budget)
    state = core.init(params)
    for t in range(ROUNDS):
        plan = driver.plan(t, state)
        outcome = driver.finish(plan, params, state, {c: _update(i) for i, c in enumerate(plan.private_cohort)})
        if t < ROUNDS - 1:
            assert outcome is not None
            params, state = outcome.params, outcome.state
    assert outcome is None and driver.stopped_by_budget
    assert driver.accountant.rounds == ROUNDS - 1 and driver.accountant.epsilon(DELTA) <= budget
    assert not driver.release(plain, {})  # once stopped, nothing more is released


def test_rounds_in_which_every_user_failed_stop_the_run_after_the_limit():
    core = _core()
    driver = _driver(core, stop_after_failed_rounds=2)
    params, state = _params(), core.init(_params())
    for t, replies in enumerate([{}, None, {}, {}]):
        plan = driver.plan(t, state)
        replies = replies if replies is not None else {c: _update(i) for i, c in enumerate(plan.private_cohort)}
        outcome = driver.finish(plan, params, state, replies)
        params, state = outcome.params, outcome.state
        assert driver.keeps_failing == (t == 3)  # round 1's replies reset the streak
    error = driver.cohorts_keep_failing(3, "fix it")
    assert "rounds 2 to 3" in str(error) and "fix it" in str(error)


def test_populations_that_do_not_fit_the_core_are_refused():
    core = _core(name="dope", public_clients_per_round=2)
    with pytest.raises(ValueError, match="built for 40 private users, got 39"):
        _driver(core, public_ids=PUBLIC).bind_users(PRIVATE[1:], PUBLIC)
    with pytest.raises(ValueError, match="trains 2 public users each round, but there are none"):
        _driver(core)
    with pytest.raises(ValueError, match="both private and public"):
        _driver(core, public_ids=[PRIVATE[0]])
    unbound = RoundDriver(core, UserLevelAccountant("pld", dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE),
                          private_ids=None, delta=DELTA)
    with pytest.raises(RuntimeError, match="no users yet"):
        unbound.plan(0, core.init(_params()))


def test_a_round_past_the_planned_ones_is_refused_before_it_is_trained_naming_what_was_spent():
    core = _core()
    driver = _driver(core, planned_rounds=2)
    params, state = _params(), core.init(_params())
    for t in range(2):
        assert driver.admit(t)
        outcome = driver.finish(driver.plan(t, state), params, state, {})
        params, state = outcome.params, outcome.state
    spent = driver.accountant.epsilon(DELTA)
    assert not driver.admit(2) and driver.stopped_by_budget
    assert driver.refusal.startswith("round 2 is past the 2 planned rounds (0 to 1")
    assert f"ε = {spent:.6g} spent" in driver.refusal
    assert driver.finish(driver.plan(2, state), params, state, {}) is None  # a transport that does not ask: refused
    assert driver.accountant.rounds == 2


def test_a_round_whose_planned_event_crosses_the_budget_is_refused_before_it_runs_naming_both_epsilons():
    core = _core()
    plain = dp_accounting.PoissonSampledDpEvent(COHORT / POPULATION, dp_accounting.GaussianDpEvent(Z))
    fresh = UserLevelAccountant("pld", dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    fresh.compose(plain, 2)
    two, three = fresh.epsilon(DELTA), fresh.epsilon_if(plain, DELTA)
    driver = _driver(core, budget_epsilon=(two + three) / 2)
    params, state = _params(), core.init(_params())
    for t in range(2):
        outcome = driver.finish(driver.plan(t, state), params, state, {})
        params, state = outcome.params, outcome.state
    assert not driver.admit(2)
    assert f"round 2 would take ε from {two:.6g} to {three:.6g}, past the budget ε = {(two + three) / 2:g}" in (
        driver.refusal
    )


def test_non_finite_and_oversized_public_updates_are_refused_with_a_warning_naming_the_user_and_the_round():
    """public_update_limit 100 × C = 1.0: a diverged public user (norm 1e7) and a NaN one are refused; the round
    keeps the usable one. A round where none is usable warns that it runs without its public part."""
    core = _core(name="dope", public_clients_per_round=3)
    assert core.public_update_bound == 100.0
    driver = _driver(core, public_ids=PUBLIC)
    params, state = _params(), core.init(_params())
    plan = driver.plan(0, state)
    diverged, nan, fine = plan.public_cohort
    public = {diverged: {k: torch.full(s, 1e7) for k, s in SHAPES.items()},
              nan: {k: torch.full(s, float("nan")) for k, s in SHAPES.items()}, fine: _update(5)}
    with pytest.warns(PublicUpdateRefused) as caught:
        outcome = driver.finish(plan, params, state, {c: _update(i) for i, c in enumerate(plan.private_cohort)}, public)
    messages = [str(w.message) for w in caught if w.category is PublicUpdateRefused]
    assert any(m.startswith(f"round 0: public user {diverged}'s update is refused: its norm") and "bound 100" in m
               for m in messages)
    assert f"round 0: public user {nan}'s update is refused: it is not finite (NaN or Inf)" in messages
    assert outcome.metrics["public_cohort_used"] == 1 and outcome.metrics["public_cohort_refused"] == 2
    assert outcome.metrics["recenter/center_norm"] == pytest.approx(1.0)  # λ defaults to C: clipped to 1.0

    plan = driver.plan(1, outcome.state)
    with pytest.warns(PublicUpdateRefused) as caught:
        infinite = {c: {k: torch.full(s, float("inf")) for k, s in SHAPES.items()} for c in plan.public_cohort}
        outcome = driver.finish(plan, outcome.params, outcome.state, {}, infinite)
    assert str(caught[-1].message).startswith("round 1: none of the 3 sampled public users gave a usable update (3 "
                                              "replied, 3 refused): the round runs without its public part")
    assert outcome.metrics["public_cohort_used"] == 0 and outcome.metrics["public_cohort_refused"] == 3
