"""What a ``fedpub audit`` of a given size can detect: the smallest noise error its estimate flags, and how many
canaries flag a given error, read off the canary statistics of the audit just run with the same estimator
(:func:`fedpub.privacy.empirical.estimate`).

A noise error f is a run that adds noise z/f while the accountant claims the ε of z. A canary's statistic is a
cosine <Δ, c_i>/‖Δ‖: its canary's share of Δ does not depend on the noise, and ‖Δ‖ is the noise's norm while the
noise dominates the model's change, so a run with f times less noise shows each inserted canary's shift over the
held-out ones f times larger, and the held-out canaries unchanged. :func:`final_statistic` and
:func:`all_iterates_statistic` rebuild the audit's statistic with the canaries' shift scaled by r: final, the shift
per round a canary joined times the rounds it joined; all iterates, each round's cosine of each joined canary
shifted, then the maximum over rounds. Where the noise does not dominate ‖Δ‖ (little noise, a large model change)
the shift grows less than f and the figures are optimistic. The shift is the one this audit measured, itself
uncertain: on the tiny test run 100 canaries saw μ 1.49 where 400 saw 0.97, and the 200 canaries the first offered
for z/2 missed it; the 800 the second offered detected it in 4 runs of 4. Few canaries give a rough offer.

An error is detected when the audit's verdict flags it in about 19 of 20 audits of that size (:data:`POWER`):
the estimate minus (1.96 + 1.645) of its bootstrap standard errors, read from the 95% interval's lower half,
exceeds the claimed ε. k·m canaries are predicted by the same estimate on the sample repeated m times: bootstrapping
it resamples m times more canaries from the same distribution, so its interval is the one m times more canaries
would give.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import ndtri  # scipy comes with dp-accounting

from fedpub.privacy.empirical import Observe, estimate

Statistic = Callable[[float], tuple[np.ndarray, np.ndarray]]
"""The inserted and held-out canaries' statistics had the inserted canaries' shift been r times what it was."""

POWER = 0.95
"""An error counts as detected when the audit flags it with this probability."""
_MARGIN = float((ndtri(0.975) + ndtri(POWER)) / ndtri(0.975))
"""(z_0.975 + z_POWER) / z_0.975: the estimate minus this times (estimate − interval's lower end) must exceed
the claim."""
LARGEST_ERROR = 1000.0
"""Errors are looked for up to this factor (a run with a thousandth of its noise); beyond: not detectable."""
MOST_CANARIES = 100_000
"""Canary counts are offered up to this many."""


def final_statistic(inserted: np.ndarray, held_out: np.ndarray, joins: np.ndarray) -> Statistic:
    """The final-model statistic with the shift scaled: ``joins[i]`` is how many rounds inserted canary i joined,
    and each join is taken to shift its cosine alike, by (mean inserted − mean held out) / mean joins."""
    per_join = float(inserted.mean() - held_out.mean()) / max(float(joins.mean()), 1e-12)
    return lambda r: (inserted + (r - 1) * per_join * joins, held_out)


def all_iterates_statistic(rounds: np.ndarray, joined: np.ndarray) -> Statistic:
    """The all-iterates statistic with the shift scaled: ``rounds`` is the (T, k) table of each round's cosines,
    the inserted canaries first, ``joined`` the (T, inserted) mask of who joined each round; a joined canary's
    cosine is shifted by the mean cosine of the joined canaries over that of the held-out ones."""
    inserted = joined.shape[1]
    cosines, held_out = rounds[:, :inserted], rounds[:, inserted:]
    shift = float(cosines[joined].mean() - held_out.mean()) if joined.any() else 0.0
    return lambda r: ((cosines + (r - 1) * shift * joined).max(axis=0), held_out.max(axis=0))


def detects(
    statistic: Statistic, r: float, copies: int, claimed: float, delta: float, observe: Observe, seed: int
) -> bool:
    """Whether ``statistic(r)`` repeated ``copies`` times is flagged with probability :data:`POWER`."""
    inserted, held_out = statistic(r)
    _, epsilon, (low, _) = estimate(
        np.tile(inserted, copies), np.tile(held_out, copies), delta, seed=seed, observe=observe
    )
    if math.isinf(low) or math.isinf(epsilon):
        return low > claimed
    return epsilon - _MARGIN * (epsilon - low) > claimed


def smallest_error(
    statistic: Statistic, noise_scale: float, claimed: float, delta: float, observe: Observe, seed: int
) -> float:
    """The smallest noise error f ≥ 1 (to 1 %) that the audit's size detects (inf: none up to
    :data:`LARGEST_ERROR`); the statistic is that of a run with noise z·``noise_scale`` (an error 1/noise_scale)."""
    return _smallest(lambda f: detects(statistic, f * noise_scale, 1, claimed, delta, observe, seed), 1.0,
                     LARGEST_ERROR, lambda low, high: high / low > 1.01, lambda low, high: math.sqrt(low * high))


def canaries_to_detect(
    statistic: Statistic, error: float, noise_scale: float, canaries: int, claimed: float, delta: float,
    observe: Observe, seed: int,
) -> int | None:
    """The fewest canaries, a multiple of ``canaries`` (the count run), that detect a noise error ``error``;
    None when :data:`MOST_CANARIES` do not."""
    copies = _smallest(lambda m: detects(statistic, error * noise_scale, int(m), claimed, delta, observe, seed), 1,
                       max(1, MOST_CANARIES // canaries), lambda low, high: high - low > 1,
                       lambda low, high: (low + high) // 2)
    return None if math.isinf(copies) else int(copies) * canaries


def _smallest(
    flagged: Callable[[float], bool], start: float, most: float, apart: Callable[[float, float], bool],
    between: Callable[[float, float], float],
) -> float:
    """The smallest x in [start, most] that is ``flagged`` (inf: none): doubled from ``start`` until flagged
    (an x too large can fail again: a huge shift widens the bootstrap interval of the all-iterates fit), then
    bisected with ``between`` while ``apart``."""
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
