"""What every recipe needs from the sampling config: the cohort rule over the population."""

from __future__ import annotations

from fedpub.config import SamplingConfig
from fedpub.privacy.events import (
    CohortRule,
    CyclicFixedSizeSampling,
    CyclicPoissonSampling,
    EpochBlocks,
    FixedSizeSampling,
    PoissonSampling,
)


def make_sampling(config: SamplingConfig, population: int) -> CohortRule:
    """q = m / N for Poisson sampling, N being the *private* population of the dataset; q = mk / N within one of the
    k groups for cyclic Poisson sampling; m users a round for fixed-size sampling (of one of the k groups for cyclic
    fixed-size sampling, where q gives m = q·⌊N/k⌋); blocks of m users, each user once an epoch, for epoch blocks."""
    if config.kind in ("poisson", "cyclic_poisson"):
        groups = config.groups or 1
        pool = population / groups
        q = config.sampling_rate if config.sampling_rate is not None else config.clients_per_round / pool
        if q > 1:
            users = f"{population}" if groups == 1 else f"{pool:g} (N/groups = {population}/{groups})"
            raise ValueError(
                f"strategy.sampling.clients_per_round={config.clients_per_round} exceeds the {users} private users"
                f"{'' if groups == 1 else ' of a round'}"
            )
        return PoissonSampling(q) if config.kind == "poisson" else CyclicPoissonSampling(q, groups)
    pool = population // config.groups if config.kind == "cyclic_fixed" else population  # q: the rate within a group
    m = config.clients_per_round if config.clients_per_round is not None else round(config.sampling_rate * pool)
    if m > population:
        raise ValueError(f"strategy.sampling.clients_per_round={m} exceeds the {population} private users")
    if m < 1:
        raise ValueError(f"strategy.sampling.sampling_rate={config.sampling_rate} gives no user a round among the "
                         f"{population} private users")
    if config.kind == "epoch_blocks":
        return EpochBlocks(population=population, block_size=int(m))
    if config.kind == "cyclic_fixed":
        if m > population // config.groups:
            raise ValueError(f"strategy.sampling.clients_per_round={m:g} exceeds the smallest group's "
                             f"{population // config.groups} private users (N // groups = {population} // "
                             f"{config.groups}): lower it or set fewer groups")
        return CyclicFixedSizeSampling(population=population, cohort_size=int(m), groups=config.groups)
    return FixedSizeSampling(population=population, cohort_size=int(m))


def secure_noise_sampler(noise_sampler: str, *, reproducible: bool) -> bool:
    """Whether ``privacy.noise_sampler`` asks for the secure sampler (``opendp``: OpenDP's Gaussian mechanism,
    ``fedpub.privacy.secure_noise``), to pass as ``secure_sampler`` to the strategy builders. Refuses ``opendp``
    for a run that must be reproducible: it draws from the operating system's randomness and cannot be seeded."""
    if noise_sampler == "torch":
        return False
    if noise_sampler != "opendp":
        raise ValueError(f"privacy.noise_sampler must be torch or opendp, got {noise_sampler!r}")
    if reproducible:
        raise ValueError("privacy.noise_sampler `opendp` draws its noise from the operating system's randomness, "
                         "which no seed reproduces: it cannot serve a reproducible run; use privacy.noise_sampler: "
                         "torch to reproduce a run from its seed")
    return True
