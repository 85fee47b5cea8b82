"""What a ``fedpub audit`` of a given size can detect, from its configuration alone (never from the canaries a run
happened to see): the power of its verdict against a run adding noise z/k while claiming the ε of z, the smallest k
it flags with 95 % power (:data:`POWER`), and the fewest canaries that flag a given k.

The model of a canary's statistic. An inserted canary sends C·c_i, c_i a random unit vector in R^d, in each round it
joins (probability q, J_i ~ Binomial(T, q) rounds of T); the round adds N(0, z²C²I) to the sum of updates. Projected
on c_i, a round's update is C when it joined, plus N(0, z²C²) of noise, plus the other inserted canaries that joined,
each C·<c_j, c_i> ~ C·N(0, 1/d). The cosine divides every canary's projection by the same ‖Δ‖, which cancels in the
estimators (a shift over a spread), so in units of C a canary's statistic is:

- final (θ_T − θ_0, the sum of the T rounds): inserted J_i/σ + g, held out g, g ~ N(0, 1), with σ² = T·z² +
  (k/2)·E[J²]/d: a canary j that joined J_j rounds lies J_j times in the sum, so the canaries' crosstalk grows as
  E[J²] = Tq(1 − q) + (Tq)², and more canaries (k) can hide each other (on a 18k-parameter model, 5,000 canaries saw
  μ 1.57 of a run adding z/2 where the noise alone would let them see 2);
- all iterates (each round's delta): inserted max_t (b_t/σ_1 + g_t), b_t ~ Bernoulli(q), held out max_t g_t, with
  σ_1² = z² + q·(k/2)/d.

:func:`canary_statistics` draws these. The model is exact for a plain server step (any learning rate) when the users'
own updates are nearly orthogonal to the canaries (d large); server momentum spreads a canary over later rounds and an
adaptive server step (Adam) bends its direction, both showing the canaries less: there the figures are the canaries'
best case (the audit says when a run's canaries stood out significantly less than the model predicts). On the tiny
test run real canaries saw about 2 % less μ than the model (likely the users' own updates, aligned over rounds, on an
18k-parameter model), and the 808 canaries offered for z/2 flagged it in 10 of 12 seeds.

The audit flags a run when the 2.5 % end of its bootstrap interval of ε exceeds the claimed ε. Its estimate is a
function of four moments (the inserted and held-out means and stds), which are nearly normal, of covariance Σ/n from
each canary's influence on them: the bootstrap clears the claim when the estimate lies more than z_0.975 standard
distances (in the metric of Σ/n) from the claim's boundary {score = score of the claimed ε}, where the score is what
the verdict is monotone in (μ for the final model, ε for all iterates). Its power against an error k with n canaries
is then Φ(β_k(n) − z_0.975), β the model moments' distance to that boundary (Hasofer & Lind's reliability index;
measured at the boundary, not at the estimate, as the bootstrap's tail is: a normal approximation of the estimate
itself overstated the k needed by 7 % at 200 canaries, by 50 % at 40). The simulated audits of
``tests/simulations/test_audit_power.py`` check it against the audit's own estimator: at 200 canaries of the tiny
test run, the k stated for 95 % is flagged in 93-95 % of them, one where it states 53 % in 54 %. The moments come
from :data:`POPULATION` draws of a fixed seed, so every figure is deterministic given the configuration and the size:
no seed, no run, moves it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import brentq, minimize  # scipy comes with dp-accounting
from scipy.special import ndtr, ndtri, ndtri_exp

from fedpub.privacy.empirical import Observe, gaussians_epsilon, gdp_epsilon
from fedpub.seeding import numpy_generator

POWER = 0.95
"""An error counts as detected when the audit flags it with this probability."""
LARGEST_ERROR = 1000.0
"""Errors are looked for up to this factor (a run with a thousandth of its noise); beyond: not detectable."""
MOST_CANARIES = 1_000_000
"""Canary counts are offered up to this many."""
POPULATION = 1 << 18
"""Synthetic canaries of each kind whose moments stand for the model's."""
_Z_INTERVAL = float(ndtri(0.975))
"""The audit's interval is a 95 % one: its lower end is about the estimate minus this many standard errors."""


@dataclass(frozen=True)
class AuditSize:
    """What an audit's power depends on: its size (inserted and held-out canaries, rounds) and the configuration's
    claim."""

    inserted: int
    held_out: int
    rounds: int
    rate: float
    """q, the rate at which an inserted canary joins a round (the users' sampling rate)."""
    noise_multiplier: float
    """z, the noise multiplier the accountant's ε is claimed for."""
    dimension: int
    """d, the model's parameter count."""
    claimed_epsilon: float
    delta: float
    observe: Observe

    def spread(self, error: float) -> float:
        """σ of a run adding noise z/``error``, in units of C: of a canary's projection on the final model's change
        (T rounds), or on one round's (all iterates)."""
        z = self.noise_multiplier / error
        if self.observe == "final":
            squared_joins = self.rounds * self.rate * (1 - self.rate + self.rounds * self.rate)
            return math.sqrt(self.rounds * z**2 + self.inserted * squared_joins / self.dimension)
        return math.sqrt(z**2 + self.rate * self.inserted / self.dimension)


def canary_statistics(size: AuditSize, error: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The inserted and held-out canaries' statistics (``size.inserted`` of each; in units where a held-out final
    cosine is N(0, 1)) of an audit of ``size`` on a run adding noise z/``error``."""
    return _draw(size, error, rng, size.inserted)


def _draw(size: AuditSize, error: float, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    joins = rng.binomial(size.rounds, size.rate, count)
    signal = 1.0 / size.spread(error)
    if size.observe == "final":
        return joins * signal + rng.standard_normal(count), rng.standard_normal(count)
    # the largest of n standard normals is Φ⁻¹(U^(1/n)); of none, −inf
    joined_max = np.where(joins > 0, ndtri_exp(np.log(rng.random(count)) / np.maximum(joins, 1)), -np.inf)
    missed_max = np.where(joins < size.rounds,
                          ndtri_exp(np.log(rng.random(count)) / np.maximum(size.rounds - joins, 1)), -np.inf)
    held_out = ndtri_exp(np.log(rng.random(count)) / size.rounds)
    return np.maximum(joined_max + signal, missed_max), held_out


def _score(observe: Observe, moments: np.ndarray, delta: float) -> float:
    """What the verdict is monotone in, from (mean, std) of the inserted then of the held-out canaries: μ for the
    final model (ε is increasing in it), the two Gaussians' ε for all iterates."""
    in_mean, in_std, out_mean, out_std = moments
    if observe == "final":
        return (in_mean - out_mean) / out_std
    return gaussians_epsilon(out_mean, out_std, in_mean, in_std, delta)


def _claimed_score(size: AuditSize) -> float:
    if size.observe != "final":
        return size.claimed_epsilon
    high = 1.0
    while gdp_epsilon(high, size.delta) <= size.claimed_epsilon:
        high *= 2
    return brentq(lambda mu: gdp_epsilon(mu, size.delta) - size.claimed_epsilon, 0.0, high)


@dataclass(frozen=True)
class _Estimate:
    """The model's four moments (mean and std of the inserted, then of the held-out canaries) and their covariance
    per canary of each kind (two 2 × 2 blocks), from :data:`POPULATION` draws of a fixed seed."""

    moments: np.ndarray
    inserted_covariance: np.ndarray
    held_out_covariance: np.ndarray

    def power(self, size: AuditSize, claimed_score: float) -> float:
        """P(the audit flags): the bootstrap's moments lie about N(estimate, covariance / canaries), so its interval
        clears the claim when the estimate lies more than z_0.975 standard distances from the claim's boundary
        {score = claimed} (in the metric of that covariance), and the estimate's own distance is about normal, of
        mean the model's distance: the reliability index of Hasofer & Lind (1974), the boundary's nearest point
        found by SLSQP. 0 when it is not found (no power is claimed that was not computed)."""
        covariance = np.zeros((4, 4))
        covariance[:2, :2] = self.inserted_covariance / size.inserted
        covariance[2:, 2:] = self.held_out_covariance / size.held_out
        root = np.linalg.cholesky(covariance)

        def excess(u: np.ndarray) -> float:
            return _score(size.observe, self.moments + root @ u, size.delta) - claimed_score

        nearest = minimize(lambda u: u @ u, np.zeros(4), jac=lambda u: 2 * u, method="SLSQP",
                           constraints={"type": "eq", "fun": excess}, options={"maxiter": 200})
        if not nearest.success or abs(excess(nearest.x)) > 1e-6 * max(1.0, abs(claimed_score)):
            return 0.0
        distance = math.copysign(float(np.linalg.norm(nearest.x)), excess(np.zeros(4)))
        return float(ndtr(distance - _Z_INTERVAL))


def _estimate(size: AuditSize, error: float) -> _Estimate:
    """The model's moments and their covariance per canary: of each canary's influence on them (x − mean on a mean,
    ((x − mean)² − std²)/(2 std) on a std)."""
    moments, blocks = [], []
    for x in _draw(size, error, numpy_generator(0, "audit_power"), POPULATION):
        mean, std = float(x.mean()), float(x.std())
        moments += [mean, std]
        blocks.append(np.cov(np.stack([x - mean, ((x - mean) ** 2 - std**2) / (2 * std)])))
    return _Estimate(np.array(moments), *blocks)


def power(size: AuditSize, error: float) -> float:
    """The probability that an audit of ``size`` flags a run adding noise z/``error`` as a VIOLATION."""
    return _estimate(size, error).power(size, _claimed_score(size))


def model_epsilon(size: AuditSize, error: float) -> float:
    """The ε the audit's estimator tends to, with ever more canaries, on a run adding noise z/``error``."""
    score = _score(size.observe, _estimate(size, error).moments, size.delta)
    return gdp_epsilon(score, size.delta) if size.observe == "final" else score


def smallest_error(size: AuditSize) -> float:
    """The smallest noise error k ≥ 1 (to 1 %, rounded up) that an audit of ``size`` flags with :data:`POWER`
    (inf: none up to :data:`LARGEST_ERROR`)."""
    claimed = _claimed_score(size)
    return _smallest(lambda k: _estimate(size, k).power(size, claimed) >= POWER, 1.0, LARGEST_ERROR,
                     lambda low, high: high / low > 1.01, lambda low, high: math.sqrt(low * high))


def canaries_to_detect(size: AuditSize, error: float) -> int | None:
    """The fewest canaries (even, to 1 %) over ``size.rounds`` rounds that flag a run adding noise z/``error`` with
    :data:`POWER`; None when none up to :data:`MOST_CANARIES` do (the canaries' crosstalk grows with their number, so
    an error whose signal stays below the claim's is detected by no count)."""
    claimed = _claimed_score(size)

    def flagged(count: float) -> bool:
        half = math.ceil(count / 2)
        resized = replace(size, inserted=half, held_out=half)
        return _estimate(resized, error).power(resized, claimed) >= POWER

    found = _smallest(flagged, 4, MOST_CANARIES, lambda low, high: high - low > max(2.0, 0.01 * low),
                      lambda low, high: (low + high) / 2)
    return None if math.isinf(found) else 2 * math.ceil(found / 2)


def _smallest(
    flagged: Callable[[float], bool], start: float, most: float, apart: Callable[[float, float], bool],
    between: Callable[[float, float], float],
) -> float:
    """The smallest x in [start, most] that is ``flagged`` (inf: none): doubled from ``start`` until flagged,
    then bisected with ``between`` while ``apart``."""
    if flagged(start):
        return start
    low = start
    while True:
        high = min(2 * low, most)
        if flagged(high):
            break
        if high >= most:
            return math.inf
        low = high
    while apart(low, high):
        middle = between(low, high)
        low, high = (low, middle) if flagged(middle) else (middle, high)
    return high
