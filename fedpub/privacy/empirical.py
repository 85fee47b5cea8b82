"""Empirical privacy from canary statistics: the ε that two samples of a statistic — of canaries inserted into
training and of canaries held out — say a mechanism has, for the one-shot estimate of Andrew, Kairouz, Oh,
Oprea, McMahan & Suriyakumar ("One-shot Empirical Privacy Estimation for Federated Learning", ICLR 2024).

Two estimators, named by what the attacker sees (:data:`Observe`):

- ``"final"`` (the final model): μ = (mean_in − mean_out) / std_out, read as μ-GDP, which is (ε, δ)-DP at
  :func:`gdp_epsilon` (Dong, Roth & Su 2019, Cor. 2.13);
- ``"all-iterates"`` (every round's model): a Gaussian fitted to each sample, its own mean and std, and ε the
  exact ε of the two, N(mean_out, std_out²) vs N(mean_in, std_in²) (:func:`gaussians_epsilon`; the estimator
  ``epsilon_two_gaussians`` of the authors' ``one_shot_epe/empirical_privacy_estimation_lib.py``).

:func:`estimate` gives either, with a 95% interval from bootstrapping the canaries. Framework-free maths on
numbers: the canaries, the training run and the report are the app's (``simulations/tools/audit.py``).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from scipy.optimize import brentq  # scipy comes with dp-accounting
from scipy.special import log_ndtr, ndtri

from fedpub.seeding import numpy_generator

Observe = Literal["final", "all-iterates"]
"""What the attacker sees: the final model, or every round's model."""


def gdp_epsilon(mu: float, delta: float) -> float:
    """The ε at which μ-GDP is (ε, δ)-DP: the root of δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth &
    Su 2019, Cor. 2.13), solved in log space; 0 when μ ≤ 0 or when ε = 0 already meets δ."""
    if mu <= 0 or math.isinf(mu):
        return max(mu, 0.0)

    def log_excess(eps: float) -> float:  # log δ(ε) − log δ, decreasing in ε
        a, b = log_ndtr(-eps / mu + mu / 2), log_ndtr(-eps / mu - mu / 2)
        return a + math.log(-math.expm1(eps + b - a)) - math.log(delta)

    if log_excess(0.0) <= 0:
        return 0.0
    return brentq(log_excess, 0.0, mu * (mu / 2 - ndtri(delta)) + 1.0)  # δ(ε) < Φ(−ε/μ + μ/2) < δ there


def _log_mass(lo: float, hi: float, mean: float, std: float) -> float:
    """log P(lo < Y < hi) for Y ~ N(mean, std²), accurate far in either tail."""
    a, b = (lo - mean) / std, (hi - mean) / std
    if a > 0:  # both ends above the mean: upper tails, Φ(−a) − Φ(−b)
        a, b = -b, -a
    high, low = log_ndtr(b), log_ndtr(a)
    return high + math.log(-math.expm1(low - high)) if low < high else -math.inf


def _log_hockey_stick(eps: float, mean_p: float, std_p: float, mean_q: float, std_q: float) -> float:
    """log sup_S P(S) − e^ε Q(S) for P = N(mean_p, std_p²), Q = N(mean_q, std_q²): S is where the privacy
    loss log p/q = a y² + b y + c exceeds ε, a half line or the inside or outside of the roots' interval."""
    a = 0.5 / std_q**2 - 0.5 / std_p**2
    b = mean_p / std_p**2 - mean_q / std_q**2
    c = math.log(std_q / std_p) + 0.5 * (mean_q / std_q) ** 2 - 0.5 * (mean_p / std_p) ** 2 - eps
    if a == 0:
        if b == 0:
            return -math.inf  # P = Q
        cut = -c / b
        region = [(cut, math.inf)] if b > 0 else [(-math.inf, cut)]
    else:
        disc = b * b - 4 * a * c
        if disc <= 0:  # the loss stays on one side of ε: S is empty or everything, and 1 − e^ε ≤ 0
            return -math.inf
        q = -0.5 * (b + math.copysign(math.sqrt(disc), b))  # the roots q/a and c/q, without cancellation
        r1, r2 = sorted((q / a, c / q))
        region = [(r1, r2)] if a < 0 else [(-math.inf, r1), (r2, math.inf)]
    log_p = float(np.logaddexp.reduce([_log_mass(lo, hi, mean_p, std_p) for lo, hi in region]))
    log_q = float(np.logaddexp.reduce([_log_mass(lo, hi, mean_q, std_q) for lo, hi in region]))
    if log_p == -math.inf or eps + log_q >= log_p:
        return -math.inf
    return log_p + math.log(-math.expm1(eps + log_q - log_p))


def gaussians_epsilon(out_mean: float, out_std: float, in_mean: float, in_std: float, delta: float) -> float:
    """The smallest ε at which N(out_mean, out_std²) and N(in_mean, in_std²) are (ε, δ)-indistinguishable,
    both ways (the privacy profile of two Gaussians, e.g. Steinke 2022, "Composition of Differential Privacy
    & Privacy Amplification by Subsampling"): 0 when they already are at ε = 0, inf when one of them is
    a point mass and they differ. Equal stds give ``gdp_epsilon(|in_mean − out_mean| / std, delta)``."""
    if min(out_std, in_std) <= 0:
        return 0.0 if (out_mean, out_std) == (in_mean, in_std) else math.inf
    log_delta = math.log(delta)

    def log_excess(eps: float) -> float:  # non-increasing in ε
        return max(_log_hockey_stick(eps, in_mean, in_std, out_mean, out_std),
                   _log_hockey_stick(eps, out_mean, out_std, in_mean, in_std)) - log_delta

    if log_excess(0.0) <= 0:
        return 0.0
    high = 1.0
    while log_excess(high) > 0:
        high *= 2
    return brentq(log_excess, high / 2 if high > 1 else 0.0, high)


def _mu(inserted: np.ndarray, held_out: np.ndarray) -> float:
    shift, spread = float(inserted.mean() - held_out.mean()), float(held_out.std(ddof=1))
    if spread == 0:  # a bootstrap resample of a few held-out canaries can repeat one value
        return math.inf if shift > 0 else 0.0
    return shift / spread


def _epsilon(observe: Observe, inserted: np.ndarray, held_out: np.ndarray, delta: float) -> float:
    """final: μ-GDP with μ = (mean_in − mean_out) / std_out; all-iterates: the two fitted Gaussians."""
    if observe == "final":
        return gdp_epsilon(_mu(inserted, held_out), delta)
    return gaussians_epsilon(
        float(held_out.mean()), float(held_out.std(ddof=1)), float(inserted.mean()), float(inserted.std(ddof=1)),
        delta,
    )


def estimate(
    inserted: np.ndarray,
    held_out: np.ndarray,
    delta: float,
    *,
    seed: int = 0,
    resamples: int = 200,
    observe: Observe = "final",
) -> tuple[float, float, tuple[float, float]]:
    """μ = (mean_in − mean_out) / std_out, the ε at ``delta`` of ``observe``'s estimator, and the 95%
    percentile interval of ε over ``resamples`` bootstrap resamples of the inserted and held-out canaries."""
    rng = numpy_generator(seed, "audit_bootstrap")
    boot = [
        _epsilon(observe, rng.choice(inserted, inserted.size), rng.choice(held_out, held_out.size), delta)
        for _ in range(resamples)
    ]
    low, high = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")  # order statistics: ε may be inf
    return _mu(inserted, held_out), _epsilon(observe, inserted, held_out, delta), (float(low), float(high))
