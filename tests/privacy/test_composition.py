"""Reusing each round event's privacy curve gives dp-accounting's epsilon and builds each curve once."""

import dp_accounting as dpa
import pytest
from dp_accounting import pld

from fedpub.privacy import composition
from fedpub.privacy.accountant import UserLevelAccountant, make_dp_accountant
from fedpub.privacy.events import PoissonSampling, round_event

DELTA = 1e-5
NR = dpa.NeighboringRelation


def _poisson(q, z):
    return dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z))


def _fresh_epsilon(kind, relation, groups):
    accountant = make_dp_accountant(kind, relation)
    for event, count in groups:
        accountant.compose(event, count)
    return accountant.get_epsilon(DELTA)


HETEROGENEOUS = [(_poisson(0.05, 0.8), 5), (_poisson(0.05, 1.2), 25), (_poisson(0.02, 1.0), 1)]
COMPOSED_ROUND = [  # rounds whose two Gaussian releases (adaptive clipping's count and the sum) are one event
    (round_event(PoissonSampling(0.05), [dpa.GaussianDpEvent(1.1), dpa.GaussianDpEvent(5.0)], 0), 40),
    (dpa.NoOpDpEvent(), 2),
]


@pytest.mark.parametrize("groups", [HETEROGENEOUS, COMPOSED_ROUND])
@pytest.mark.parametrize("kind", ["pld", "rdp"])
def test_grouped_epsilon_equals_a_fresh_dp_accounting_accountant(kind, groups):
    setting = (kind, NR.ADD_OR_REMOVE_ONE, 1e-4)
    got = composition.grouped_epsilon(lambda: make_dp_accountant(*setting), setting, groups, DELTA)
    assert got == pytest.approx(_fresh_epsilon(kind, NR.ADD_OR_REMOVE_ONE, groups), rel=1e-12 if kind == "rdp" else 1e-6)


def test_fixed_size_sampling_under_rdp_and_non_private_rounds():
    wor = [(dpa.SampledWithoutReplacementDpEvent(200, 20, dpa.GaussianDpEvent(1.0)), 30)]
    setting = ("rdp", NR.REPLACE_ONE, 1e-4)
    got = composition.grouped_epsilon(lambda: make_dp_accountant(*setting), setting, wor, DELTA)
    assert got == pytest.approx(_fresh_epsilon("rdp", NR.REPLACE_ONE, wor), rel=1e-12)
    for kind in ("pld", "rdp"):
        accountant = UserLevelAccountant(kind)
        accountant.compose(_poisson(0.1, 1.0), 3)
        accountant.compose(dpa.NonPrivateDpEvent())
        assert accountant.epsilon(DELTA) == float("inf")


def test_a_run_builds_its_round_curve_once(monkeypatch):
    composition.clear_cache()
    built = []
    original = pld.PLDAccountant.compose

    def counting(self, event, count=1):
        built.append(event)
        return original(self, event, count)

    monkeypatch.setattr(pld.PLDAccountant, "compose", counting)
    accountant = UserLevelAccountant("pld")
    epsilons = []
    for _ in range(20):
        accountant.compose(_poisson(0.01, 1.0))
        epsilons.append(accountant.epsilon(DELTA))
    assert len(built) == 1
    assert epsilons == sorted(epsilons) and epsilons[0] < epsilons[-1]
    assert epsilons[-1] == pytest.approx(_fresh_epsilon("pld", NR.ADD_OR_REMOVE_ONE, [(_poisson(0.01, 1.0), 20)]), rel=1e-6)
