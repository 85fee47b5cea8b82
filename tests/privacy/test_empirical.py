"""Empirical ε from canary statistics: μ-GDP's (ε, δ) (Dong, Roth & Su), the exact ε of two Gaussians, and the
bootstrapped estimate of both estimators."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss
from scipy.integrate import trapezoid
from scipy.stats import norm

from fedpub.privacy.empirical import estimate, gaussians_epsilon, gdp_epsilon


def test_gdp_epsilon_solves_dong_roth_su_and_matches_the_exact_gaussian_mechanism():
    delta = 1e-5
    eps = gdp_epsilon(1.0, delta)
    assert norm.cdf(-eps + 0.5) - math.exp(eps) * norm.cdf(-eps - 0.5) == pytest.approx(delta, rel=1e-6)
    for mu in (0.3, 1.0, 4.0):  # μ-GDP is the Gaussian mechanism with sensitivity 1 and σ = 1/μ
        gaussian = GaussianPrivacyLoss(standard_deviation=1 / mu)
        assert gaussian.get_delta_for_epsilon(gdp_epsilon(mu, delta)) == pytest.approx(delta, rel=1e-6)
    grid = [gdp_epsilon(mu, delta) for mu in np.linspace(0.1, 60, 60)]
    assert all(a < b for a, b in zip(grid, grid[1:]))
    assert gdp_epsilon(-0.5, delta) == gdp_epsilon(0.0, delta) == gdp_epsilon(1e-7, delta) == 0.0
    assert math.isfinite(gdp_epsilon(1000.0, delta)) and gdp_epsilon(math.inf, delta) == math.inf


def _hockey_stick(eps, p, q):
    """sup_S P(S) − e^ε Q(S) = ∫ (p − e^ε q)_+, integrated numerically on a fine grid."""
    y = np.linspace(min(p.mean(), q.mean()) - 20 * max(p.std(), q.std()),
                    max(p.mean(), q.mean()) + 20 * max(p.std(), q.std()), 2_000_001)
    return trapezoid(np.clip(p.pdf(y) - math.exp(eps) * q.pdf(y), 0, None), y)


def test_gaussians_epsilon_is_the_exact_epsilon_of_two_fitted_gaussians():
    delta = 1e-5
    for mu in (0.3, 1.0, 4.0):  # equal stds: μ-GDP, either side
        assert gaussians_epsilon(0.0, 2.0, 2.0 * mu, 2.0, delta) == pytest.approx(gdp_epsilon(mu, delta), rel=1e-9)
        assert gaussians_epsilon(5.0, 2.0, 5.0 - 2.0 * mu, 2.0, delta) == pytest.approx(gdp_epsilon(mu, delta), rel=1e-9)
    for out_mean, out_std, in_mean, in_std in [(1.7, 0.5, 2.2, 0.6), (0.0, 1.0, 0.0, 1.2), (0.0, 1.0, 0.5, 0.8)]:
        eps = gaussians_epsilon(out_mean, out_std, in_mean, in_std, delta)
        p, q = norm(in_mean, in_std), norm(out_mean, out_std)
        assert eps > 0
        assert max(_hockey_stick(eps, p, q), _hockey_stick(eps, q, p)) == pytest.approx(delta, rel=1e-4)
        assert max(_hockey_stick(0.99 * eps, p, q), _hockey_stick(0.99 * eps, q, p)) > delta
    wider = [gaussians_epsilon(0.0, 1.0, 0.5, s, delta) for s in (1.0, 1.1, 1.3, 1.6)]
    assert all(a < b for a, b in zip(wider, wider[1:]))  # a wider inserted distribution is seen
    assert gaussians_epsilon(0.0, 1.0, 0.0, 1.0, delta) == 0.0 and gaussians_epsilon(0.0, 1.0, 1e-9, 1.0, delta) == 0.0
    assert gaussians_epsilon(0.0, 0.0, 1.0, 1.0, delta) == math.inf


def test_estimate_reads_mu_from_the_canaries_and_brackets_its_epsilon_by_the_bootstrap():
    rng = np.random.default_rng(0)
    held_out, inserted = rng.normal(0.0, 1.0, 2000), rng.normal(2.0, 1.0, 2000)
    mu, eps, (low, high) = estimate(inserted, held_out, 1e-5, seed=3)
    assert mu == pytest.approx((inserted.mean() - held_out.mean()) / held_out.std(ddof=1))
    assert mu == pytest.approx(2.0, abs=0.1) and eps == gdp_epsilon(mu, 1e-5)
    assert low < eps < high and high - low < 0.5 * eps
    assert estimate(inserted, held_out, 1e-5, seed=3) == (mu, eps, (low, high))  # the seed fixes the bootstrap
    wide = rng.normal(2.0, 1.5, 2000)  # all iterates: each sample's own std counts
    _, eps_all, (low_all, high_all) = estimate(wide, held_out, 1e-5, seed=3, observe="all-iterates")
    assert eps_all == gaussians_epsilon(
        float(held_out.mean()), float(held_out.std(ddof=1)), float(wide.mean()), float(wide.std(ddof=1)), 1e-5
    )
    assert low_all < eps_all < high_all
    assert estimate(np.ones(4), np.full(4, 0.5), 1e-5, resamples=20)[:2] == (math.inf, math.inf)  # no spread
