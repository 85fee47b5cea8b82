"""DP-FTRL as a recipe (strategies/dp_ftrl.py): its cohort rule, its accounting (RDP only, calibrated to a
target ε), its composition with DOPE's recentering, and what the config refuses."""

from __future__ import annotations

import dp_accounting
import pytest
import torch
from dp_accounting.rdp import rdp_privacy_accountant

from fedpub import tree
from fedpub.config import PrivacyConfig, StrategyConfig
from fedpub.privacy.events import EpochBlocks, PoissonSampling
from fedpub.strategies.build import build_private_strategy
from fedpub.strategies.compose import build_strategy

SHAPES = {"w": (6, 4), "b": (4,)}
POPULATION, BLOCK, ROUNDS, Z, C, DELTA = 30, 4, 16, 1.1, 0.5, 1e-5  # 7 blocks of 4 or 5 users an epoch
TREE = dp_accounting.SingleEpochTreeAggregationDpEvent


def _config(**overrides) -> StrategyConfig:
    return StrategyConfig(**{"name": "dp_ftrl", "clip_norm": C, "noise_multiplier": Z,
                             "sampling": {"clients_per_round": BLOCK}, **overrides})


def _core(config: StrategyConfig, seed: int = 0):
    return build_strategy(config, sampling=EpochBlocks(POPULATION, BLOCK), population=POPULATION,
                          noise_multiplier=config.noise_multiplier, seed=seed, rounds=ROUNDS)


def _random_tree(seed: int, scale: float = 1.0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: scale * torch.randn(s, generator=g) for k, s in SHAPES.items()}


def test_each_epoch_trains_every_user_once_in_blocks_and_plans_one_tree_per_epoch():
    core = _core(_config())
    ids = [f"u{i:02d}" for i in range(POPULATION)]
    k = POPULATION // BLOCK
    cohorts = [core.sample_cohort(ids, t) for t in range(ROUNDS)]
    for epoch in range(ROUNDS // k):
        assert sorted(u for c in cohorts[epoch * k:(epoch + 1) * k] for u in c) == ids
    assert core.expected_cohort == pytest.approx(POPULATION / k)
    # 16 rounds = 2 epochs of 7 and a last tree of 2 rounds, each paid when it starts
    assert core.planned_event(ROUNDS) == dp_accounting.ComposedDpEvent(
        [dp_accounting.SelfComposedDpEvent(TREE(Z, 7), 2), TREE(Z, 2)]
    )
    assert [core.planned_round_event(t) for t in (0, 1, 7, 14, 15)] == [
        TREE(Z, 7), dp_accounting.NoOpDpEvent(), TREE(Z, 7), TREE(Z, 2), dp_accounting.NoOpDpEvent()
    ]


def test_the_noise_on_the_mean_is_divided_by_the_expected_cohort_whoever_replied():
    core = _core(_config())
    params = {k: torch.zeros(s) for k, s in SHAPES.items()}
    replies = [_random_tree(i, scale=0.01) for i in range(2)]  # 2 of the block's users replied, none clipped
    outcome = core.aggregate(params, replies, core.init(params), 0, sampled=4)
    m = POPULATION / (POPULATION // BLOCK)
    assert outcome.metrics["noise/noise_std"] == pytest.approx(Z * C / m)
    assert outcome.metrics["aggregate/expected_cohort"] == pytest.approx(m)
    assert outcome.diagnostics["cohort_failed"] == 2


def test_a_target_epsilon_is_calibrated_with_rdp_and_the_run_spends_it():
    """Checked against dp_accounting's RDP accountant composing the trees directly (replace-special)."""
    config = _config(noise_multiplier=None, target_epsilon=3.0)
    built = build_private_strategy(config, PrivacyConfig(delta=DELTA, accountant="rdp"), population=POPULATION,
                                   rounds=ROUNDS, seed=0, reproducible=True)
    z = built.noise_multiplier
    accountant = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    accountant.compose(TREE(z, 7), 2).compose(TREE(z, 2))
    assert 3.0 - 1e-3 <= accountant.get_epsilon(DELTA) <= 3.0
    slightly_less = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    assert slightly_less.compose(TREE(0.99 * z, 7), 2).compose(TREE(0.99 * z, 2)).get_epsilon(DELTA) > 3.0
    fresh = built.new_accountant()
    fresh.compose(built.planned_event)
    assert fresh.epsilon(DELTA) == pytest.approx(accountant.get_epsilon(DELTA))


@pytest.mark.parametrize("target", [None, 3.0])
def test_the_pld_accountant_is_refused_naming_the_field_and_the_allowed_value(target):
    config = _config(noise_multiplier=None if target else Z, target_epsilon=target)
    with pytest.raises(ValueError, match=r"privacy.accountant: the pld accountant .* accountant='rdp'"):
        build_private_strategy(
            config, PrivacyConfig(delta=DELTA), population=POPULATION, rounds=ROUNDS, seed=0, reproducible=True
        )


def test_with_public_recentering_the_chain_is_recenter_clip_aggregate_tree_noise_add_center():
    core = _core(_config(recenter={"center_clip": 2.0}, public_clients_per_round=2))
    assert list(core.init({k: torch.zeros(s) for k, s in SHAPES.items()})) == [
        "recenter", "clip", "aggregate", "noise", "add_center", "server_opt"
    ]


def test_recentering_around_a_zero_center_is_dp_ftrl_exactly():
    params = {k: torch.zeros(s) for k, s in SHAPES.items()}
    plain, dope = _core(_config(), seed=4), _core(_config(recenter={}, public_clients_per_round=2), seed=4)
    plain_state, dope_state = plain.init(params), dope.init(params)
    zeros = [{k: torch.zeros(s) for k, s in SHAPES.items()}] * 2
    for t in range(3):
        updates = [_random_tree(10 * t + i, scale=2.0) for i in range(4)]
        a = plain.aggregate(params, updates, plain_state, t)
        b = dope.aggregate(params, updates, dope_state, t, public_updates=zeros)
        for k in params:
            assert torch.equal(a.params[k], b.params[k])
        assert a.event == b.event
        plain_state, dope_state = a.state, b.state


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e4])
@pytest.mark.parametrize("center_scale", [0.0, 30.0])
def test_with_recentering_the_special_record_moves_a_leaf_by_at_most_c_whatever_the_center(scale, center_scale):
    """Replace-special neighbours: the special record is a user who contributes nothing (as a user who fails
    does; the divisor stays m). Replacing one user of the round by it moves the round's sum, a leaf of the
    tree, by at most C whatever the public center, which is added outside the sum."""
    params = {k: torch.zeros(s) for k, s in SHAPES.items()}
    core = _core(_config(noise_multiplier=0.0, recenter={}, public_clients_per_round=2))
    public = [_random_tree(50 + i, scale=center_scale) for i in range(2)]
    cohort = [_random_tree(i, scale=3.0) for i in range(3)]
    user = _random_tree(99, scale=scale)
    with_user = core.aggregate(params, cohort + [user], core.init(params), 0, public_updates=public).params
    special = core.aggregate(params, cohort, core.init(params), 0, sampled=4, public_updates=public).params
    moved = float(tree.global_norm(tree.sub(with_user, special))) * core.expected_cohort
    assert moved <= C * (1 + 1e-5) + 1e-6 * (1 + center_scale)  # float32 rounding of the added center
    assert moved > 0


def test_the_config_refuses_what_a_tree_cannot_take():
    with pytest.raises(ValueError, match="sampling.kind must be epoch_blocks, got poisson"):
        _config(sampling={"kind": "poisson", "clients_per_round": BLOCK})
    with pytest.raises(ValueError, match="remove adaptive_clip"):
        _config(adaptive_clip={"count_noise_std": 3.0})
    with pytest.raises(ValueError, match="remove budget_schedule"):
        _config(budget_schedule={"boosted_rounds": 1, "boosted_noise_multiplier": 0.5})
    with pytest.raises(ValueError, match="epoch_blocks"):
        build_strategy(_config(), sampling=PoissonSampling(0.1), population=POPULATION, noise_multiplier=Z, seed=0,
                       rounds=ROUNDS)
    assert _config().sampling.kind == "epoch_blocks"  # the recipe's cohort rule when the kind is not given
