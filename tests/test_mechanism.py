"""Tests of the mechanism itself, not only of the code (docs/design.md §2.8, §5)."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpub import tree
from fedpub.config import PrivacyConfig, SamplingConfig, StrategyConfig
from fedpub.privacy.events import FixedSizeSampling, PoissonSampling
from fedpub.seeding import torch_generator
from fedpub.strategy import StrategyCore
from fedpub.strategies.build import build_private_strategy
from fedpub.strategies.compose import build_strategy
from fedpub.strategies.common import make_sampling


def _strategy(clip_norm, z, sampling, population, server=None, seed=0) -> StrategyCore:
    cfg = StrategyConfig(clip_norm=clip_norm, noise_multiplier=z, server_optimizer=server or {})
    return build_strategy(cfg, sampling=sampling, population=population, noise_multiplier=z, seed=seed, rounds=10)


def _random_tree(shapes, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return {k: scale * torch.randn(s, generator=g) for k, s in shapes.items()}


SHAPES = {"w": (6, 4), "b": (4,)}


def test_infinite_clip_and_no_noise_is_plain_fedavg_of_deltas():
    params = _random_tree(SHAPES, 0)
    updates = [_random_tree(SHAPES, s, scale=10.0) for s in range(1, 6)]
    core = _strategy(math.inf, 0.0, FixedSizeSampling(population=5, cohort_size=5), 5)
    outcome = core.aggregate(params, updates, core.init(params), 0)
    for k in params:
        torch.testing.assert_close(outcome.params[k], params[k] + torch.stack([u[k] for u in updates]).mean(0))
    assert isinstance(outcome.event, dp_accounting.NonPrivateDpEvent)


def test_one_example_clients_with_one_local_step_is_dp_sgd():
    """DP-FedAvg with 1-example users, one local SGD step of lr η, clip C = η·C' and server lr 1
    equals one DP-SGD step with per-example clip C', noise z·C' on the summed gradients, ÷ m."""
    from fedpub.clients.local_training import LocalTrainingConfig, train_client
    from fedpub.data.base import ClientData
    from fedpub.models import build_model
    from fedpub.models.seeded import model_params

    eta, c_grad, z, m, population = 0.1, 0.05, 1.3, 4.0, 40
    model = build_model("emnist_mlp", 10, generator=torch.Generator().manual_seed(0))
    params = model_params(model)
    g = torch.Generator().manual_seed(5)
    xs, ys = torch.rand(5, 1, 28, 28, generator=g), torch.randint(10, (5,), generator=g)

    local = LocalTrainingConfig(epochs=1, batch_size=1, lr=eta)
    updates = [
        train_client(model, params, ClientData(xs[i : i + 1], ys[i : i + 1]), local, torch.Generator().manual_seed(i)).update
        for i in range(5)
    ]
    core = _strategy(eta * c_grad, z, PoissonSampling(m / population), population, seed=11)
    fed = core.aggregate(params, updates, core.init(params), 0).params

    # DP-SGD, written out: per-example gradients, clip to C', sum, add N(0, (zC')²), ÷ m, step η
    clipped_sum = {k: torch.zeros_like(v) for k, v in params.items()}
    for i in range(5):
        model.zero_grad()
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(params[name])
        torch.nn.functional.cross_entropy(model(xs[i : i + 1]), ys[i : i + 1]).backward()
        grad = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
        factor = min(1.0, c_grad / float(tree.global_norm(grad)))
        clipped_sum = tree.add(clipped_sum, tree.scale(grad, factor))
    # ξ = −z·C'·n with n the noise step's standard normal draws (ξ has the law of N(0, (zC')²)):
    # the update points downhill, the gradient uphill, so the same draws enter with opposite signs
    noise_gen = torch_generator(11, "gaussian_noise")
    noisy = {k: v - z * c_grad * torch.normal(0.0, 1.0, size=v.shape, generator=noise_gen) for k, v in clipped_sum.items()}
    sgd = {k: params[k] - eta * noisy[k] / m for k in params}
    for k in params:
        torch.testing.assert_close(fed[k], sgd[k], rtol=1e-5, atol=1e-7)


def test_noise_on_the_mean_has_std_z_c_over_m_with_population_driven_m():
    population, m, z, c = 1000, 40.0, 1.1, 0.7
    params = {"w": torch.zeros(300_000)}
    core = _strategy(c, z, PoissonSampling(m / population), population, seed=2)
    outcome = core.aggregate(params, [], core.init(params), 0)  # an empty cohort: only noise
    measured = outcome.params["w"].double().std().item()
    assert measured == pytest.approx(z * c / m, rel=0.01)
    assert outcome.metrics["noise/noise_std"] == pytest.approx(z * c / m)
    assert outcome.event == dp_accounting.PoissonSampledDpEvent(m / population, dp_accounting.GaussianDpEvent(z))


@settings(max_examples=40, deadline=None)
@given(
    scale=st.floats(min_value=1e-3, max_value=1e8),
    seed=st.integers(0, 10_000),
    clip_norm=st.floats(min_value=0.01, max_value=10.0),
)
def test_adding_one_user_with_any_update_moves_the_pre_noise_sum_by_at_most_c(scale, seed, clip_norm):
    params = {k: torch.zeros(s) for k, s in SHAPES.items()}  # so the new model *is* the released mean
    cohort = [_random_tree(SHAPES, seed + i, scale=3.0) for i in range(4)]
    newcomer = _random_tree(SHAPES, seed + 100, scale=scale)
    m = 4.0
    core = _strategy(clip_norm, 0.0, PoissonSampling(m / 100), 100)
    without = core.aggregate(params, cohort, core.init(params), 0).params
    with_user = core.aggregate(params, cohort + [newcomer], core.init(params), 0).params
    moved = float(tree.global_norm(tree.sub(with_user, without))) * m  # the mean is the sum ÷ m
    assert moved <= clip_norm * (1 + 1e-5)


def test_failed_replies_contribute_nothing_and_do_not_change_the_mechanism():
    params = _random_tree(SHAPES, 0)
    good = [_random_tree(SHAPES, s) for s in range(3)]
    one_inf = {k: v.clone() for k, v in good[0].items()}
    next(iter(one_inf.values())).view(-1)[-1] = float("inf")
    bad = [
        {k: torch.full_like(v, float("nan")) for k, v in params.items()},
        {"w": torch.zeros(6, 4)},
        one_inf,
        {k: v.double() for k, v in good[1].items()},
    ]
    core = _strategy(1.0, 0.5, PoissonSampling(0.1), 30)
    clean = core.aggregate(params, good, core.init(params), 0)
    faulty = core.aggregate(params, bad[:2] + good + bad[2:], core.init(params), 0)
    for k in params:
        torch.testing.assert_close(clean.params[k], faulty.params[k])
    assert faulty.diagnostics["cohort_failed"] == 4.0 and faulty.event == clean.event
    assert faulty.diagnostics["clip/norm_max"] == clean.diagnostics["clip/norm_max"]


def test_the_sampling_rate_comes_from_the_population():
    sampling = make_sampling(SamplingConfig(clients_per_round=50), population=500)
    assert sampling == PoissonSampling(0.1)
    with pytest.raises(ValueError, match="exceeds the 30 private users"):
        make_sampling(SamplingConfig(clients_per_round=50), population=30)


def test_poisson_cohorts_really_vary_with_mean_qn():
    population, q = 400, 0.05
    core = _strategy(1.0, 1.0, PoissonSampling(q), population)
    ids = [f"u{i:03d}" for i in range(population)]
    sizes = np.array([len(core.sample_cohort(ids, t)) for t in range(2000)])
    assert sizes.std() > 0
    # mean of 2000 Binomial(400, 0.05) draws: std of the mean is about 0.1
    assert sizes.mean() == pytest.approx(q * population, abs=0.5)
    assert sizes.var() == pytest.approx(population * q * (1 - q), rel=0.15)
    assert core.sample_cohort(ids, 7) == core.sample_cohort(ids, 7)


def test_fixed_size_cohorts_have_exactly_m_users():
    core = _strategy(1.0, 1.0, FixedSizeSampling(population=50, cohort_size=7), 50)
    ids = [str(i) for i in range(50)]
    assert {len(core.sample_cohort(ids, t)) for t in range(50)} == {7}


def test_target_epsilon_calibrates_the_noise():
    from fedpub.privacy.accountant import epsilon_for

    sampling = PoissonSampling(0.1)
    cfg = StrategyConfig(target_epsilon=3.0, sampling={"sampling_rate": 0.1})
    z = build_private_strategy(
        cfg, PrivacyConfig(delta=1e-5), population=100, rounds=20, seed=0, reproducible=True
    ).noise_multiplier
    assert epsilon_for(sampling, z, 20, 1e-5) <= 3.0
    assert epsilon_for(sampling, z * 0.98, 20, 1e-5) > 3.0


def test_adaptive_clipping_accounts_the_noisy_count_and_noises_with_c_t():
    sampling = PoissonSampling(0.1)
    cfg = StrategyConfig(
        clip_norm=1.0, noise_multiplier=1.2, adaptive_clip={"target_quantile": 0.5, "learning_rate": 0.5, "count_noise_std": 3.0}
    )
    core = build_strategy(cfg, sampling=sampling, population=100, noise_multiplier=1.2, seed=0, rounds=10)
    params = {k: torch.zeros(s) for k, s in SHAPES.items()}
    state = core.init(params)
    big = [_random_tree(SHAPES, s, scale=100.0) for s in range(10)]  # every update clipped: C must grow
    first = core.aggregate(params, big, state, 0)
    second = core.aggregate(params, big, first.state, 1)
    assert second.metrics["clip/clip_norm"] > first.metrics["clip/clip_norm"] == 1.0
    for outcome in (first, second):
        c_t = outcome.metrics["clip/clip_norm"]
        assert outcome.metrics["noise/noise_std"] == pytest.approx(1.2 * c_t / 10.0)  # C_t, not C_{t+1}
        z_eff = (1.2**-2 + 3.0**-2) ** -0.5
        assert outcome.event == dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(pytest.approx(z_eff)))


def test_adaptive_clipping_calibrated_to_a_target_spends_exactly_that_budget():
    """The plan holds the noisy count's release too: the sum's z is calibrated so that the round's merged
    Gaussian, z_eff = (z⁻² + σ_b⁻²)^(−1/2), is the plain calibration's."""
    from fedpub.privacy.accountant import epsilon_for

    sampling = PoissonSampling(0.1)
    privacy = PrivacyConfig(delta=1e-5)
    plain = StrategyConfig(target_epsilon=3.0, sampling={"sampling_rate": 0.1})
    z_round = build_private_strategy(
        plain, privacy, population=100, rounds=20, seed=0, reproducible=True
    ).noise_multiplier
    cfg = StrategyConfig(target_epsilon=3.0, sampling={"sampling_rate": 0.1}, adaptive_clip={"count_noise_std": 5.0})
    built = build_private_strategy(cfg, privacy, population=100, rounds=20, seed=0, reproducible=True)
    z_sum = built.noise_multiplier
    assert z_sum > z_round
    z_eff = (z_sum**-2 + 5.0**-2) ** -0.5
    assert z_eff == pytest.approx(z_round, abs=1e-4)
    assert built.planned_event == dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(pytest.approx(z_eff))), 20
    )
    assert epsilon_for(sampling, z_eff, 20, 1e-5) <= 3.0 + 1e-9
    with pytest.raises(ValueError, match=r"a noisy count\) alone already spend"):
        build_private_strategy(cfg.model_copy(update={"adaptive_clip": cfg.adaptive_clip.model_copy(
            update={"count_noise_std": 0.3})}), privacy, population=100, rounds=20, seed=0, reproducible=True)


def _dope(clip_norm, z, population, center_clip=math.inf, seed=0, clip_around_center=True):
    cfg = StrategyConfig(name="dope", clip_norm=clip_norm, noise_multiplier=z,
                         recenter={"center_clip": center_clip, "clip_around_center": clip_around_center})
    return build_strategy(
        cfg, sampling=PoissonSampling(5 / population), population=population, noise_multiplier=z, seed=seed, rounds=10
    )


def test_dope_with_a_zero_center_is_dp_fedavg_exactly():
    params = _random_tree(SHAPES, 0)
    updates = [_random_tree(SHAPES, s, scale=2.0) for s in range(1, 6)]
    zeros = [{k: torch.zeros(s) for k, s in SHAPES.items()}] * 3
    fedavg = _strategy(1.0, 0.9, PoissonSampling(5 / 50), 50, seed=4)
    reference = fedavg.aggregate(params, updates, fedavg.init(params), 0)
    for public in ([], zeros):
        core = _dope(1.0, 0.9, 50, seed=4)
        outcome = core.aggregate(params, updates, core.init(params), 0, public_updates=public)
        for k in params:
            assert torch.equal(outcome.params[k], reference.params[k])
        assert outcome.event == reference.event


def test_dope_without_recentering_is_dp_fedavg_plus_the_center_at_dopes_weight():
    """The control that removes recentering alone: the same noisy DP-FedAvg mean (clipped around zero, the same
    draws), plus the public mean at DOPE's weight 1, and the same event."""
    params = _random_tree(SHAPES, 0)
    updates = [_random_tree(SHAPES, s, scale=2.0) for s in range(1, 6)]
    public = [_random_tree(SHAPES, 10 + s, scale=0.5) for s in range(3)]
    fedavg = _strategy(1.0, 0.9, PoissonSampling(5 / 50), 50, seed=4)
    reference = fedavg.aggregate(params, updates, fedavg.init(params), 0)
    core = _dope(1.0, 0.9, 50, seed=4, clip_around_center=False)
    outcome = core.aggregate(params, updates, core.init(params), 0, public_updates=public)
    center = tree.mean(public)
    for k in params:
        torch.testing.assert_close(outcome.params[k], reference.params[k] + center[k])
    assert outcome.event == reference.event
    recentered = _dope(1.0, 0.9, 50, seed=4)
    differs = recentered.aggregate(params, updates, recentered.init(params), 0, public_updates=public).params
    assert any(not torch.allclose(differs[k], outcome.params[k]) for k in params)


@settings(max_examples=40, deadline=None)
@given(scale=st.floats(min_value=1e-3, max_value=1e8), center_scale=st.floats(min_value=0.0, max_value=1e4),
       seed=st.integers(0, 10_000))
def test_dope_adding_one_user_moves_the_pre_noise_sum_by_at_most_c_whatever_the_center(scale, center_scale, seed):
    params = {k: torch.zeros(s) for k, s in SHAPES.items()}
    public = [_random_tree(SHAPES, seed + 50 + i, scale=center_scale) for i in range(3)]
    cohort = [_random_tree(SHAPES, seed + i, scale=3.0) for i in range(4)]
    newcomer = _random_tree(SHAPES, seed + 100, scale=scale)
    core = _dope(0.5, 0.0, 100)
    without = core.aggregate(params, cohort, core.init(params), 0, public_updates=public).params
    with_user = core.aggregate(params, cohort + [newcomer], core.init(params), 0, public_updates=public).params
    moved = float(tree.global_norm(tree.sub(with_user, without))) * 5.0  # m = 5
    center_norm = float(tree.global_norm(tree.mean(public)))
    assert moved <= 0.5 * (1 + 1e-5) + 1e-6 * (1 + center_norm)  # float32 rounding of the added center


def test_dope_public_updates_cost_no_privacy_and_the_center_is_clipped_to_lambda():
    params = {k: torch.zeros(s) for k, s in SHAPES.items()}
    public = [_random_tree(SHAPES, 7, scale=10.0)]
    core = _dope(1.0, 1.0, 50, center_clip=0.25)
    with_public = core.aggregate(params, [], core.init(params), 0, public_updates=public)
    without = core.aggregate(params, [], core.init(params), 0)
    assert with_public.event == without.event == dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.0))
    assert with_public.metrics["recenter/center_norm"] == pytest.approx(0.25, rel=1e-5)
    assert with_public.metrics["public_cohort_used"] == 1.0
