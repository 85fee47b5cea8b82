"""UserLevelAccountant and friends, pinned to accounting.md §4 with the real dp_accounting."""

from __future__ import annotations

import json
import math

import dp_accounting as dpa
import pytest
from dp_accounting import pld, rdp
from fedpub.privacy import accountant as accountant_module

from fedpub.privacy import (
    BudgetExceededError,
    FixedSizeSampling,
    PoissonSampling,
    PrivacyBudget,
    PrivacyError,
    UserLevelAccountant,
    check_first_round,
    cross_check,
    epsilon_for,
    round_event,
)

NR = dpa.NeighboringRelation
G = dpa.GaussianDpEvent
DELTA = 1e-5


def poisson(q: float, z: float) -> dpa.DpEvent:
    return dpa.PoissonSampledDpEvent(q, G(z))


def hetero(kind: str) -> UserLevelAccountant:
    """accounting.md §4e, composed round by round: q=0.05, z=0.6 for 10 rounds then 1.0 for 90."""
    accountant = UserLevelAccountant(kind)
    for t in range(100):
        accountant.compose(round_event(PoissonSampling(0.05), [G(0.6 if t < 10 else 1.0)], t))
    return accountant


@pytest.fixture(scope="module")
def classic() -> dict[str, UserLevelAccountant]:
    """accounting.md §4a: q=0.01, z=1.1, T=10000."""
    result = {}
    for kind in ("rdp", "pld"):
        result[kind] = UserLevelAccountant(kind)
        result[kind].compose(poisson(0.01, 1.1), 10_000)
    return result


def test_classic_dp_fedavg_oracle(classic: dict[str, UserLevelAccountant]) -> None:
    direct = dpa.SelfComposedDpEvent(poisson(0.01, 1.1), 10_000)
    eps_rdp, eps_pld = classic["rdp"].epsilon(DELTA), classic["pld"].epsilon(DELTA)
    assert eps_rdp == pytest.approx(5.6320, rel=1e-4)
    assert eps_pld == pytest.approx(5.1926, rel=1e-3)
    assert eps_rdp == pytest.approx(rdp.RdpAccountant().compose(direct).get_epsilon(DELTA), rel=1e-12)
    # the cached curve is composed once with the identity PLD before self-composition: 1e-7 apart
    assert eps_pld == pytest.approx(
        pld.PLDAccountant(value_discretization_interval=1e-4).compose(direct).get_epsilon(DELTA), rel=1e-6
    )
    assert classic["pld"].ledger == direct
    assert classic["pld"].rounds == 10_000


def test_epsilon_for_matches(classic: dict[str, UserLevelAccountant]) -> None:
    s = PoissonSampling(0.01)
    for kind in ("rdp", "pld"):
        eps = epsilon_for(s, 1.1, 10_000, DELTA, kind)
        assert eps == pytest.approx(classic[kind].epsilon(DELTA), rel=1e-12)


def test_heterogeneous_schedule_oracle() -> None:
    expected = {"rdp": 7.5046, "pld": 6.2157}
    for kind, rel in (("rdp", 1e-4), ("pld", 1e-3)):
        accountant = hetero(kind)
        assert accountant.epsilon(DELTA) == pytest.approx(expected[kind], rel=rel)
        assert accountant.rounds == 100
        assert accountant.ledger == dpa.ComposedDpEvent([
            dpa.SelfComposedDpEvent(poisson(0.05, 0.6), 10),
            dpa.SelfComposedDpEvent(poisson(0.05, 1.0), 90),
        ])


def test_fixed_size_oracle_uses_half_the_multiplier() -> None:
    sampling = FixedSizeSampling(3400, 100)
    accountant = UserLevelAccountant("rdp", NR.REPLACE_ONE)
    accountant.compose(round_event(sampling, [G(1.0)], 0), 1500)
    assert accountant.epsilon(DELTA) == pytest.approx(145.519, rel=1e-5)
    assert epsilon_for(sampling, 1.0, 1500, DELTA, "rdp") == pytest.approx(145.519, rel=1e-5)


def test_homogeneous_run_stays_one_self_composition() -> None:
    accountant = UserLevelAccountant()
    for _ in range(50):
        accountant.compose(poisson(0.1, 2.0))
        accountant.compose(dpa.NoOpDpEvent())
    accountant.compose(dpa.SelfComposedDpEvent(poisson(0.1, 2.0), 25))
    assert accountant.ledger == dpa.SelfComposedDpEvent(poisson(0.1, 2.0), 75)
    assert accountant.rounds == 101


def test_nothing_private_costs_nothing() -> None:
    accountant = UserLevelAccountant()
    assert accountant.epsilon(DELTA) == 0.0
    accountant.compose(round_event(PoissonSampling(0.1), [G(math.inf)], 0), 3)
    assert accountant.epsilon(DELTA) == 0.0
    assert accountant.ledger == dpa.NoOpDpEvent()
    assert accountant.rounds == 3
    accountant.compose(round_event(PoissonSampling(0.1), [G(0.0)], 0))
    assert accountant.epsilon(DELTA) == math.inf


def test_epsilon_if_leaves_the_state_unchanged() -> None:
    accountant = UserLevelAccountant("rdp")
    accountant.compose(poisson(0.05, 1.0), 10)
    before = (accountant.to_dict(), accountant.epsilon(DELTA))
    eps_next = accountant.epsilon_if(poisson(0.05, 0.8), DELTA, count=2)
    assert (accountant.to_dict(), accountant.epsilon(DELTA)) == before
    assert eps_next > before[1]
    accountant.compose(poisson(0.05, 0.8), 2)
    assert accountant.epsilon(DELTA) == eps_next


def test_epsilon_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = accountant_module.grouped_epsilon

    def counting(new_accountant, setting, groups, delta):
        calls.append(delta)
        return original(new_accountant, setting, groups, delta)

    monkeypatch.setattr(accountant_module, "grouped_epsilon", counting)
    accountant = UserLevelAccountant()
    accountant.compose(poisson(0.1, 1.5), 10)
    first = [accountant.epsilon(DELTA) for _ in range(5)]
    assert len(calls) == 1 and len(set(first)) == 1
    # The round loop prices the next round, composes it, then reports: one evaluation.
    eps_next = accountant.epsilon_if(poisson(0.1, 1.5), DELTA)
    accountant.compose(poisson(0.1, 1.5))
    assert accountant.epsilon(DELTA) == eps_next
    assert len(calls) == 2
    accountant.epsilon(1e-6)
    assert len(calls) == 3


def test_stop_before_the_budget_is_exceeded() -> None:
    budget = PrivacyBudget(epsilon=2.5, delta=DELTA)
    accountant = UserLevelAccountant("rdp")
    event = poisson(0.05, 1.0)
    while accountant.epsilon_if(event, budget.delta) <= budget.epsilon:
        accountant.compose(event)
    assert 0 < accountant.rounds < 100
    assert accountant.epsilon(budget.delta) <= budget.epsilon < accountant.epsilon_if(event, budget.delta)


@pytest.mark.parametrize("kind", ["rdp", "pld"])
def test_dict_round_trip(kind: str) -> None:
    accountant = UserLevelAccountant(kind)
    for z in (1.0, 1.0, 2.0, 1.0, math.inf):
        accountant.compose(round_event(PoissonSampling(0.01), [G(z)], 0), 25)
    restored = UserLevelAccountant.from_dict(json.loads(json.dumps(accountant.to_dict())))
    assert restored.to_dict() == accountant.to_dict()
    assert restored.ledger == accountant.ledger
    assert restored.rounds == accountant.rounds == 125
    assert len(restored.ledger.events) == 3
    assert restored.epsilon(DELTA) == accountant.epsilon(DELTA)


def test_dict_round_trip_keeps_settings() -> None:
    accountant = UserLevelAccountant("rdp", NR.REPLACE_ONE, pld_discretization=1e-3)
    accountant.compose(round_event(FixedSizeSampling(3400, 100), [G(2.0)], 0), 5)
    restored = UserLevelAccountant.from_dict(json.loads(json.dumps(accountant.to_dict())))
    assert (restored.accountant, restored.neighboring_relation, restored.pld_discretization) == (
        "rdp", NR.REPLACE_ONE, 1e-3)
    assert restored.epsilon(DELTA) == accountant.epsilon(DELTA)


def test_bad_state_dicts() -> None:
    state = UserLevelAccountant().to_dict()
    with pytest.raises(PrivacyError, match="rounds"):
        UserLevelAccountant.from_dict({k: v for k, v in state.items() if k != "rounds"})
    with pytest.raises(PrivacyError, match="neighboring_relation"):
        UserLevelAccountant.from_dict({**state, "neighboring_relation": "SWAP"})
    with pytest.raises(PrivacyError, match="accountant"):
        UserLevelAccountant.from_dict({**state, "accountant": "prv"})
    with pytest.raises(PrivacyError, match=r"groups\[0\]"):
        UserLevelAccountant.from_dict({**state, "groups": [{"count": 3}]})


def test_unsupported_combinations_say_what_to_use() -> None:
    fixed = round_event(FixedSizeSampling(3400, 100), [G(1.0)], 0)
    with pytest.raises(PrivacyError, match="accountant='rdp' with REPLACE_ONE"):
        UserLevelAccountant("pld", NR.REPLACE_ONE).compose(fixed)
    with pytest.raises(PrivacyError, match="REPLACE_ONE"):
        UserLevelAccountant("rdp").compose(fixed)
    with pytest.raises(PrivacyError, match="ADD_OR_REMOVE_ONE"):
        UserLevelAccountant("rdp", NR.REPLACE_ONE).compose(poisson(0.1, 1.0))
    with pytest.raises(PrivacyError, match="ADD_OR_REMOVE_ONE"):
        UserLevelAccountant("rdp", NR.REPLACE_ONE).epsilon_if(poisson(0.1, 1.0), DELTA)


def test_invalid_arguments_name_the_field() -> None:
    with pytest.raises(PrivacyError, match="accountant"):
        UserLevelAccountant("prv")  # type: ignore[arg-type]
    with pytest.raises(PrivacyError, match="neighboring_relation"):
        UserLevelAccountant("pld", "REPLACE_ONE")  # type: ignore[arg-type]
    with pytest.raises(PrivacyError, match="pld_discretization"):
        UserLevelAccountant("pld", pld_discretization=0.0)
    accountant = UserLevelAccountant("rdp")
    with pytest.raises(PrivacyError, match="count"):
        accountant.compose(poisson(0.1, 1.0), 0)
    with pytest.raises(PrivacyError, match="event"):
        accountant.compose(1.0)  # type: ignore[arg-type]
    for delta in (0.0, 1.0, -1e-5, math.nan):
        with pytest.raises(PrivacyError, match="delta"):
            accountant.epsilon(delta)
    assert accountant.rounds == 0


def test_cross_check() -> None:
    event = dpa.SelfComposedDpEvent(poisson(0.05, 1.0), 100)
    result = cross_check(event, DELTA)
    assert result["rdp"] == pytest.approx(4.0389, rel=1e-4)
    assert result["pld"] == pytest.approx(3.5021, rel=1e-3)
    fixed = dpa.SelfComposedDpEvent(round_event(FixedSizeSampling(3400, 100), [G(1.0)], 0), 1500)
    assert cross_check(fixed, DELTA, NR.REPLACE_ONE) == {"rdp": pytest.approx(145.519, rel=1e-5)}
    with pytest.raises(PrivacyError, match="event_or_ledger"):
        cross_check(UserLevelAccountant(), DELTA)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("epsilon", "delta", "field"),
    [(0.0, 1e-5, "epsilon"), (-1.0, 1e-5, "epsilon"), (math.inf, 1e-5, "epsilon"),
     (1.0, 0.0, "delta"), (1.0, 1.0, "delta")],
)
def test_invalid_budget_names_the_field(epsilon: float, delta: float, field: str) -> None:
    with pytest.raises(PrivacyError, match=field):
        PrivacyBudget(epsilon, delta)


def test_check_first_round() -> None:
    accountant = UserLevelAccountant("rdp")
    event = poisson(0.05, 0.3)  # one round costs about 9.3 at delta 0.0025 (accounting.md §4b)
    with pytest.raises(BudgetExceededError, match=r"epsilon=9\.28.*budget epsilon=1"):
        check_first_round(PrivacyBudget(1.0, 0.0025), accountant, event)
    assert issubclass(BudgetExceededError, PrivacyError)
    assert check_first_round(PrivacyBudget(10.0, 0.0025), accountant, event) == pytest.approx(9.289, rel=1e-3)
    assert accountant.rounds == 0


def test_absl_warning_is_silenced(caplog: pytest.LogCaptureFixture) -> None:
    accountant = UserLevelAccountant("rdp")
    accountant.compose(poisson(0.05, 0.3))  # orders 1.1-1.5 do not converge at this z (pitfall 4)
    accountant.epsilon(DELTA)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
