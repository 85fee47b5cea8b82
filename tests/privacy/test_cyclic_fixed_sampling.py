"""Cyclic fixed-size sampling (the fixed-size form of Choquette-Choo et al. 2023's cyclic sampling, for SecAgg+):
the groups, the cohorts and their accounting against an independent dp-accounting oracle."""

import math

import dp_accounting as dpa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpub.config import ConfigError, parse_config
from fedpub.privacy import (
    CyclicFixedSizeSampling,
    FixedSizeSampling,
    PrivacyError,
    UserLevelAccountant,
    epsilon_for,
    run_event,
)
from fedpub.privacy.events import round_event
from fedpub.strategies.common import make_sampling

G = dpa.GaussianDpEvent
DELTA = 1e-5


@st.composite
def rules(draw):
    groups = draw(st.integers(1, 6))
    population = draw(st.integers(groups, 60))
    cohort = draw(st.integers(1, population // groups))
    return CyclicFixedSizeSampling(population=population, cohort_size=cohort, groups=groups)


@settings(max_examples=40, deadline=None)
@given(rule=rules(), seed=st.integers(0, 2**62), rounds=st.integers(1, 30))
def test_each_round_draws_m_of_its_group_and_no_user_twice_within_k_rounds(rule, seed, rounds):
    ids = [f"user-{i}" for i in range(rule.population)]
    groups = rule.group_positions(seed)
    assert sorted(i for group in groups for i in group) == list(range(rule.population))  # a partition
    assert sorted(len(group) for group in groups)[0] == rule.smallest_group
    assert max(len(group) for group in groups) == math.ceil(rule.population / rule.groups)
    last: dict[str, int] = {}
    for t in range(rounds):
        cohort = rule.draw(ids, seed, t)
        assert len(cohort) == rule.cohort_size and cohort == [u for u in ids if u in set(cohort)]
        assert {ids.index(u) for u in cohort} <= set(groups[t % rule.groups].tolist())
        for user in cohort:
            assert t - last.get(user, -rule.groups) >= rule.groups
            last[user] = t


@settings(max_examples=30, deadline=None)
@given(rule=rules(), seed=st.integers(0, 2**62), data=st.data())
def test_the_groups_read_no_data_a_replacing_user_takes_the_replaced_ones_place(rule, seed, data):
    ids = [f"u{i}" for i in range(rule.population)]
    position = data.draw(st.integers(0, rule.population - 1))
    replaced = [*ids[:position], "newcomer", *ids[position + 1:]]
    for t in range(2 * rule.groups):
        before, after = rule.draw(ids, seed, t), rule.draw(replaced, seed, t)
        assert [u if u != ids[position] else "newcomer" for u in before] == after


def test_the_partition_depends_on_the_seed_and_each_user_falls_in_each_group_alike():
    rule = CyclicFixedSizeSampling(population=12, cohort_size=2, groups=3)
    assert [g.tolist() for g in rule.group_positions(1)] != [g.tolist() for g in rule.group_positions(2)]
    seeds = 3000
    in_group_zero = sum(0 in rule.group_positions(seed)[0] for seed in range(seeds))
    assert abs(in_group_zero - seeds / 3) < 4 * math.sqrt(seeds * (1 / 3) * (2 / 3))  # binomial(3000, 1/3), 4 sd


def test_one_group_is_fixed_size_sampling_cohorts_and_events():
    ids = [f"user-{i}" for i in range(50)]
    cyclic, fixed = CyclicFixedSizeSampling(50, 7, 1), FixedSizeSampling(50, 7)
    assert all(cyclic.draw(ids, 3, t) == fixed.draw(ids, 3, t) for t in range(20))
    assert cyclic.expected_cohort(50) == fixed.expected_cohort(50) == 7.0
    assert run_event(cyclic, [G(1.1)], 30) == run_event(fixed, [G(1.1)], 30)
    assert epsilon_for(cyclic, 1.1, 30, DELTA, "rdp") == epsilon_for(fixed, 1.1, 30, DELTA, "rdp")


def test_round_events_pay_group_zeros_rounds_at_the_smallest_group():
    rule = CyclicFixedSizeSampling(population=14, cohort_size=2, groups=3)  # groups of 5, 5 and 4
    paid = dpa.SampledWithoutReplacementDpEvent(4, 2, G(0.75))  # replace-one: z / 2
    assert [round_event(rule, [G(1.5)], t) for t in range(4)] == [paid, dpa.NoOpDpEvent(), dpa.NoOpDpEvent(), paid]
    assert round_event(rule, [G(1.5), G(0.0)], 2) == dpa.NonPrivateDpEvent()  # a round without noise never is free
    assert run_event(rule, [G(1.5)], 10) == dpa.SelfComposedDpEvent(paid, 4)
    assert rule.neighboring_relation == dpa.NeighboringRelation.REPLACE_ONE


def _oracle(population: int, cohort: int, z: float, rounds: int, groups: int) -> float:
    """dp-accounting alone: ⌈T/k⌉ samples of m of ⌊N/k⌋ without replacement, each a Gaussian at replace-one
    sensitivity 2C, composed by its RDP accountant."""
    accountant = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    event = dpa.SampledWithoutReplacementDpEvent(population // groups, cohort, G(z / 2))
    accountant.compose(dpa.SelfComposedDpEvent(event, math.ceil(rounds / groups)))
    return accountant.get_epsilon(DELTA)


@pytest.mark.parametrize(("population", "cohort", "groups", "rounds", "z"),
                         [(400, 10, 4, 100, 1.0), (1000, 20, 5, 37, 2.0), (90, 3, 9, 9, 0.7)])
def test_epsilon_equals_dp_accountings_for_ceil_rounds_over_groups(population, cohort, groups, rounds, z):
    rule = CyclicFixedSizeSampling(population, cohort, groups)
    expected = _oracle(population, cohort, z, rounds, groups)
    assert epsilon_for(rule, z, rounds, DELTA, "rdp") == pytest.approx(expected, rel=1e-9)
    accountant = UserLevelAccountant("rdp", rule.neighboring_relation)
    for t in range(rounds):  # a run composing round by round
        accountant.compose(round_event(rule, [G(z)], t))
    assert accountant.epsilon(DELTA) == pytest.approx(expected, rel=1e-9)


def test_config_and_its_refusals():
    def strategy(sampling, **more):
        return {"strategy": {"noise_multiplier": 1.0, "sampling": sampling, **more}}

    config = parse_config(strategy({"kind": "cyclic_fixed", "clients_per_round": 10, "groups": 4}))
    assert make_sampling(config.strategy.sampling, 203) == CyclicFixedSizeSampling(203, 10, 4)
    by_rate = parse_config(strategy({"kind": "cyclic_fixed", "sampling_rate": 0.2, "groups": 4}))
    assert make_sampling(by_rate.strategy.sampling, 203) == CyclicFixedSizeSampling(203, 10, 4)  # q within a group
    with pytest.raises(ConfigError, match="groups"):
        parse_config(strategy({"kind": "cyclic_fixed", "clients_per_round": 10}))
    with pytest.raises(ConfigError, match="groups"):
        parse_config(strategy({"kind": "fixed", "clients_per_round": 10, "groups": 2}))
    with pytest.raises(ConfigError, match="whole number"):
        parse_config(strategy({"kind": "cyclic_fixed", "clients_per_round": 2.5, "groups": 2}))
    with pytest.raises(ConfigError, match="cyclic_fixed prices group 0's rounds.*remove budget_schedule"):
        parse_config(strategy({"kind": "cyclic_fixed", "clients_per_round": 10, "groups": 2},
                              budget_schedule={"boosted_rounds": 2, "boosted_noise_ratio": 0.5}))
    with pytest.raises(ValueError, match=r"clients_per_round=51 exceeds the smallest group's 50 private users "
                                         r"\(N // groups = 203 // 4\)"):
        make_sampling(parse_config(strategy({"kind": "cyclic_fixed", "clients_per_round": 51, "groups": 4}))
                      .strategy.sampling, 203)
    with pytest.raises(PrivacyError, match=r"cohort_size must be at most the smallest group's 2 users"):
        CyclicFixedSizeSampling(10, 3, 4)
    with pytest.raises(PrivacyError, match="groups must be an integer >= 1"):
        CyclicFixedSizeSampling(10, 3, 0)
