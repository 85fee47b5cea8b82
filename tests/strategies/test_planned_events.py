"""The open event contract (fedpub/step.py ``releases``, fedpub/privacy/events.py ``round_event``): what a
recipe's steps declare is what its rounds compose, and calibration prices the declared plan.

- every round's declared event equals the event the round actually composes, for each recipe and cohort rule
  (PPSGD apart: its later z_t depend on the public users, and the driver prices each round's actual event),
  DP-FTRL's trees (one event on each tree's first round) included;
- a budget schedule's boosted rounds are in the plan from their step, so a target ε is met exactly with them;
- the planned run is the rounds self-composed, as the accountant's ledger of the run.
"""

from __future__ import annotations

import dp_accounting
import pytest
import torch

from fedpub.config import PrivacyConfig, StrategyConfig
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.events import EpochBlocks, FixedSizeSampling, PoissonSampling
from fedpub.strategies.build import build_private_strategy
from fedpub.strategies.compose import build_strategy

SHAPES = {"w": (6, 4), "b": (4,)}
POPULATION, ROUNDS, Z, DELTA = 40, 7, 0.9, 1e-5
G = dp_accounting.GaussianDpEvent

RECIPES = {
    "dp_fedavg": {},
    "adaptive_clip": {"adaptive_clip": {"count_noise_std": 4.0}},
    "boosted_first": {"budget_schedule": {"boosted_rounds": 2, "boosted_noise_multiplier": 0.5}},
    "boosted_last": {"budget_schedule": {"boosted_rounds": 3, "boosted_noise_ratio": 0.5, "position": "last"}},
    "dope": {"name": "dope", "recenter": {"center_clip": 2.0}},
}
RULES = {
    "poisson": PoissonSampling(8 / POPULATION),
    "fixed": FixedSizeSampling(POPULATION, 8),
    "epoch_blocks": EpochBlocks(POPULATION, 8),
}


def _update(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: 3 * torch.randn(s, generator=g) for k, s in SHAPES.items()}


TREE_RECIPES = {"dp_ftrl": {"name": "dp_ftrl"}, "dp_ftrl+recenter": {"name": "dp_ftrl", "recenter": {}}}


@pytest.mark.parametrize(
    ("recipe", "rule"), [(r, s) for r in RECIPES for s in RULES] + [(r, "epoch_blocks") for r in TREE_RECIPES]
)
def test_each_rounds_declared_event_is_the_event_it_composes(recipe: str, rule: str) -> None:
    sampling = RULES[rule]
    overrides = {**RECIPES, **TREE_RECIPES}[recipe]
    config = StrategyConfig(**{"noise_multiplier": Z, "sampling": {"clients_per_round": 8}, **overrides})
    core = build_strategy(config, sampling=sampling, population=POPULATION, noise_multiplier=Z, seed=3, rounds=ROUNDS)
    params = {k: torch.zeros(s) for k, s in SHAPES.items()}
    state = core.init(params)
    ids = [f"u{i}" for i in range(POPULATION)]
    accountant = UserLevelAccountant("rdp", sampling.neighboring_relation)
    for t in range(ROUNDS):
        cohort = core.sample_cohort(ids, t)
        outcome = core.aggregate(params, [_update(100 * t + i) for i in range(len(cohort))], state, t,
                                 public_updates=[_update(7), _update(8)])
        assert outcome.event == core.planned_round_event(t)
        accountant.compose(outcome.event)
        params, state = outcome.params, outcome.state
    assert accountant.ledger == core.planned_event(ROUNDS)


def test_the_boosted_rounds_plan_and_the_calibrated_target() -> None:
    """k = 2 first rounds at 0.5·z, T − k at z: the plan says so, and its ε is the target (direct dp_accounting)."""
    config = StrategyConfig(target_epsilon=3.0, sampling={"clients_per_round": 8},
                            budget_schedule={"boosted_rounds": 2, "boosted_noise_ratio": 0.5})
    built = build_private_strategy(config, PrivacyConfig(delta=DELTA, accountant="rdp"), population=POPULATION,
                                   rounds=ROUNDS, seed=0, reproducible=True)
    z, q = built.noise_multiplier, 8 / POPULATION
    assert built.planned_event == dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, G(0.5 * z)), 2),
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, G(z)), ROUNDS - 2),
    ])
    direct = dp_accounting.rdp.RdpAccountant().compose(built.planned_event).get_epsilon(DELTA)
    assert 3.0 - 1e-3 <= direct <= 3.0


def test_a_first_round_past_the_budget_is_refused_when_built() -> None:
    config = StrategyConfig(noise_multiplier=Z, sampling={"clients_per_round": 8},
                            budget_schedule={"boosted_rounds": 1, "boosted_noise_multiplier": 0.2})
    with pytest.raises(ValueError, match="a single round costs"):
        build_private_strategy(config, PrivacyConfig(delta=DELTA, budget_epsilon=1.0), population=POPULATION,
                               rounds=ROUNDS, seed=0, reproducible=True)
