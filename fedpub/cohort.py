"""Choosing the round's private cohort: really Poisson (what the accountant assumes) or fixed size.

Poisson: each of the N private users joins independently with probability q, so the cohort size
varies round to round (McMahan et al. 2018; Abadi et al. 2016). Fixed size: m users without
replacement, accounted with the without-replacement event under replace-one neighbours.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpub.privacy.events import FixedSizeSampling, PoissonSampling, Sampling


def expected_cohort(sampling: Sampling, population: int) -> float:
    """m = qN for Poisson sampling, the fixed size otherwise."""
    if isinstance(sampling, PoissonSampling):
        return sampling.sampling_rate * population
    return float(sampling.cohort_size)


def sample_cohort(
    sampling: Sampling, client_ids: Sequence[str], generator: np.random.Generator
) -> list[str]:
    """The round's private cohort, in the order of ``client_ids``."""
    n = len(client_ids)
    if isinstance(sampling, PoissonSampling):
        chosen = np.flatnonzero(generator.random(n) < sampling.sampling_rate)
    elif isinstance(sampling, FixedSizeSampling):
        if sampling.population != n:
            raise ValueError(
                f"fixed-size sampling was set up for {sampling.population} users, got {n}"
            )
        chosen = np.sort(generator.choice(n, size=sampling.cohort_size, replace=False))
    else:
        raise TypeError(f"unknown sampling {sampling!r}")
    return [client_ids[i] for i in chosen]
