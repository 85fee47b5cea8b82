"""Pieces every recipe needs: the sampling rule from config and population, and the noise
multiplier (given, or calibrated to a target ε with the accountant)."""

from __future__ import annotations

from fedpub.config import BudgetScheduleConfig, PrivacyConfig, SamplingConfig
from fedpub.privacy.calibration import calibrate_noise_multiplier
from fedpub.privacy.events import FixedSizeSampling, PoissonSampling, Sampling


def make_sampling(config: SamplingConfig, population: int) -> Sampling:
    """q = m / N for Poisson sampling, N being the *private* population of the dataset."""
    if config.kind == "poisson":
        q = config.sampling_rate if config.sampling_rate is not None else config.clients_per_round / population
        if q > 1:
            raise ValueError(
                f"strategy.sampling.clients_per_round={config.clients_per_round} exceeds the "
                f"{population} private users"
            )
        return PoissonSampling(q)
    m = config.clients_per_round if config.clients_per_round is not None else round(config.sampling_rate * population)
    if m > population:
        raise ValueError(f"strategy.sampling.clients_per_round={m} exceeds the {population} private users")
    return FixedSizeSampling(population=population, cohort_size=int(m))


def resolve_noise_multiplier(
    noise_multiplier: float | None,
    target_epsilon: float | None,
    sampling: Sampling,
    rounds: int,
    privacy: PrivacyConfig,
    *,
    boost: BudgetScheduleConfig | None = None,
) -> float:
    """The configured z, or the smallest z reaching ``target_epsilon`` after ``rounds`` rounds, of which
    ``boost.boosted_rounds`` use z_b (given, or a ratio times z)."""
    if noise_multiplier is not None:
        return noise_multiplier
    if target_epsilon is None:
        raise ValueError("give one of noise_multiplier or target_epsilon")
    boosted = boosted_ratio = None
    if boost is not None and boost.boosted_noise_multiplier is not None:
        boosted = (boost.boosted_rounds, boost.boosted_noise_multiplier)
    elif boost is not None:
        boosted_ratio = (boost.boosted_rounds, boost.boosted_noise_ratio)
    return calibrate_noise_multiplier(
        target_epsilon,
        privacy.delta,
        sampling,
        rounds,
        accountant=privacy.accountant,
        boosted=boosted,
        boosted_ratio=boosted_ratio,
    )
