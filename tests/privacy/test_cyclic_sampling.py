"""Cyclic Poisson sampling (Choquette-Choo et al. 2023, §4): the groups, the cohorts and their accounting against
an independent dp-accounting oracle."""

import math

import dp_accounting as dpa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpub.config import ConfigError, parse_config
from fedpub.privacy import (
    CyclicPoissonSampling,
    PoissonSampling,
    PrivacyError,
    UserLevelAccountant,
    calibrate_noise_multiplier,
    epsilon_for,
    run_event,
)
from fedpub.privacy.events import cyclic_group, round_event
from fedpub.strategies.common import make_sampling

G = dpa.GaussianDpEvent
DELTA = 1e-5


@settings(max_examples=40, deadline=None)
@given(
    users=st.integers(1, 60), groups=st.integers(1, 6), rate=st.floats(0.05, 1.0), seed=st.integers(0, 2**62),
    rounds=st.integers(1, 30),
)
def test_no_user_takes_part_in_two_rounds_closer_than_the_groups(users, groups, rate, seed, rounds):
    rule = CyclicPoissonSampling(rate, groups)
    ids = [f"user-{i}" for i in range(users)]
    last: dict[str, int] = {}
    for t in range(rounds):
        cohort = rule.draw(ids, seed, t)
        assert cohort == [u for u in ids if u in set(cohort)]  # in the order of the ids
        for user in cohort:
            assert cyclic_group(user, seed, groups) == t % groups
            assert t - last.get(user, -groups) >= groups
            last[user] = t


@settings(max_examples=30, deadline=None)
@given(users=st.integers(2, 80), groups=st.integers(1, 8), seed=st.integers(0, 2**62), data=st.data())
def test_adding_or_removing_a_user_moves_no_other_between_groups(users, groups, seed, data):
    ids = [f"u{i}" for i in range(users)]
    removed = data.draw(st.sampled_from(ids))
    before = {u: cyclic_group(u, seed, groups) for u in ids}
    after = {u: cyclic_group(u, seed, groups) for u in [*ids, "newcomer"] if u != removed}
    assert all(after[u] == before[u] for u in ids if u != removed)


def test_groups_depend_on_the_seed_and_split_the_users_evenly():
    ids = [str(i) for i in range(4000)]
    counts = [sum(cyclic_group(u, 7, 4) == g for u in ids) for g in range(4)]
    assert all(abs(c - 1000) < 4 * math.sqrt(1000 * 0.75) for c in counts)  # binomial(4000, 1/4), 4 sd
    assert [cyclic_group(u, 7, 4) for u in ids] != [cyclic_group(u, 8, 4) for u in ids]


def test_one_group_is_poisson_sampling_cohorts_and_events():
    ids = [f"user-{i}" for i in range(200)]
    cyclic, poisson = CyclicPoissonSampling(0.1, 1), PoissonSampling(0.1)
    assert all(cyclic.draw(ids, 3, t) == poisson.draw(ids, 3, t) for t in range(20))
    assert cyclic.expected_cohort(200) == poisson.expected_cohort(200) == pytest.approx(20)
    assert run_event(cyclic, [G(1.1)], 50) == run_event(poisson, [G(1.1)], 50)
    assert epsilon_for(cyclic, 1.1, 50, DELTA) == epsilon_for(poisson, 1.1, 50, DELTA)


def test_round_events_pay_in_group_zeros_rounds_only():
    rule = CyclicPoissonSampling(0.2, 3)
    paid = dpa.PoissonSampledDpEvent(0.2, G(1.5))
    assert [round_event(rule, [G(1.5)], t) for t in range(4)] == [paid, dpa.NoOpDpEvent(), dpa.NoOpDpEvent(), paid]
    assert round_event(rule, [G(1.5), G(0.0)], 1) == dpa.NonPrivateDpEvent()  # a round without noise never is free
    assert run_event(rule, [G(1.5)], 10) == dpa.SelfComposedDpEvent(paid, 4)
    assert rule.expected_cohort(300) == pytest.approx(20)


def _oracle(q: float, z: float, rounds: int, groups: int, delta: float = DELTA) -> float:
    """dp-accounting alone: ⌈T/k⌉ Poisson-sampled Gaussians composed by its PLD accountant."""
    accountant = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, G(z)), math.ceil(rounds / groups)))
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize(("rounds", "groups", "q", "z"), [(100, 4, 0.1, 1.0), (37, 5, 0.3, 2.0), (9, 9, 0.05, 0.7)])
def test_epsilon_equals_dp_accountings_for_ceil_rounds_over_groups(rounds, groups, q, z):
    rule = CyclicPoissonSampling(q, groups)
    assert epsilon_for(rule, z, rounds, DELTA) == pytest.approx(_oracle(q, z, rounds, groups), rel=1e-9)
    accountant = UserLevelAccountant("pld")
    for t in range(rounds):  # a run composing round by round
        accountant.compose(round_event(rule, [G(z)], t))
    assert accountant.epsilon(DELTA) == pytest.approx(_oracle(q, z, rounds, groups), rel=1e-9)


def test_calibration_over_rounds_groups_and_rate(tmp_path):
    rule = CyclicPoissonSampling(0.2, 5)
    z = calibrate_noise_multiplier(2.0, DELTA, rule, 100, cache_dir=tmp_path)
    assert _oracle(0.2, z, 100, 5) <= 2.0 < _oracle(0.2, z - 2e-4, 100, 5)
    assert z < calibrate_noise_multiplier(2.0, DELTA, PoissonSampling(0.2), 100, cache_dir=tmp_path)


def test_config_and_its_refusals():
    def strategy(sampling, **more):
        return {"strategy": {"noise_multiplier": 1.0, "sampling": sampling, **more}}

    config = parse_config(strategy({"kind": "cyclic_poisson", "clients_per_round": 10, "groups": 4}))
    rule = make_sampling(config.strategy.sampling, 200)
    assert rule == CyclicPoissonSampling(0.2, 4) and rule.expected_cohort(200) == pytest.approx(10)
    with pytest.raises(ConfigError, match="groups"):
        parse_config(strategy({"kind": "cyclic_poisson", "sampling_rate": 0.1}))
    with pytest.raises(ConfigError, match="groups"):
        parse_config(strategy({"kind": "poisson", "sampling_rate": 0.1, "groups": 2}))
    with pytest.raises(ConfigError, match="remove budget_schedule"):
        parse_config(strategy({"kind": "cyclic_poisson", "sampling_rate": 0.1, "groups": 2},
                                  budget_schedule={"boosted_rounds": 2, "boosted_noise_ratio": 0.5}))
    with pytest.raises(ValueError, match="exceeds the 50 .N/groups = 200/4. private users"):
        make_sampling(parse_config(strategy({"kind": "cyclic_poisson", "clients_per_round": 60, "groups": 4}))
                      .strategy.sampling, 200)
    with pytest.raises(PrivacyError, match="groups must be an integer >= 1"):
        CyclicPoissonSampling(0.1, 0)
