"""One strategy from one config: the recipes' steps composed in the order of DESIGN.md §3.

precondition (AdaDPS) → recenter (DOPE) → boosted rounds (seed 001) → clip | adaptive clip |
public schedule (PPSGD) → aggregate (÷ m) → Gaussian noise | tree noise (DP-FTRL) → add the center (DOPE) →
mirror mix (PDA-DPMD) → server optimizer. Every part but the private mean is optional, so a config may
combine them (e.g. warm start + DOPE + AdaDPS + mirror). The private mean, its sensitivity C_t and
its accounting are DP-FedAvg's (DP-FTRL's with ``tree_aggregation``) whatever is composed around it.
``secure_sampler`` draws the private mean's Gaussian noise with OpenDP (``privacy.noise_sampler: opendp``).
"""

from __future__ import annotations

from fedpub.config import StrategyConfig
from fedpub.privacy.accountant import PrivacyBudget
from fedpub.privacy.events import CohortRule
from fedpub.step import Step, named_chain
from fedpub.steps.budget_schedule import budget_schedule
from fedpub.strategy import StrategyCore
from fedpub.types import Updates
from fedpub.strategies import adadps, dope, dp_ftrl, pda_dpmd, ppsgd
from fedpub.strategies.dp_fedavg import private_mean_steps, server_optimizer


def boosted_rounds(config: StrategyConfig, rounds: int) -> range:
    """The rounds that spend more budget (seed 001): the first or the last ``boosted_rounds``."""
    schedule = config.budget_schedule
    if schedule is None:
        return range(0)
    if schedule.boosted_rounds >= rounds:
        raise ValueError(
            f"strategy.budget_schedule.boosted_rounds={schedule.boosted_rounds} must be fewer than the "
            f"{rounds} rounds"
        )
    k = schedule.boosted_rounds
    return range(k) if schedule.position == "first" else range(rounds - k, rounds)


def strategy_steps(
    config: StrategyConfig,
    noise_multiplier: float,
    seed: int,
    rounds: int,
    side_information: Updates | None,
    sampling: CohortRule,
    *,
    secure_sampler: bool = False,
    schedule_noise_scale: float | None = None,
) -> list[tuple[str, Step]]:
    """The named steps of ``config`` in chain order (the private mean's are ``clip``, ``aggregate``, ``noise``).
    ``schedule_noise_scale`` is PPSGD's k (:func:`fedpub.strategies.ppsgd.noise_test_scale`); None is only
    allowed where the config's public schedule reads its own noise."""
    if config.public_schedule is not None and schedule_noise_scale is None:
        schedule_noise_scale = ppsgd.noise_test_scale(config.public_schedule, None, 1.0, rounds, noise_multiplier)
    before, after = (
        dope.recentering_steps(config.recenter, config.clip_norm) if config.recenter is not None else ([], [])
    )
    steps = []
    if config.precondition is not None:
        steps += adadps.preconditioning_steps(config.precondition, side_information)
    steps += before
    if config.budget_schedule is not None:
        boosted_z = config.budget_schedule.boosted_z(noise_multiplier)
        schedule = budget_schedule(boosted_rounds(config, rounds), boosted_z)
        steps.append(("budget_schedule", schedule))
    if config.tree_aggregation is not None:
        noised = dp_ftrl.private_mean_steps(config, noise_multiplier, seed, sampling, rounds,
                                            secure_sampler=secure_sampler)
    else:
        noised = private_mean_steps(config, noise_multiplier, seed, secure_sampler=secure_sampler,
                                    schedule_noise_scale=schedule_noise_scale or 1.0)
    steps += noised + after
    if config.mirror is not None:
        steps += pda_dpmd.mirror_steps(config.mirror, rounds)
    return steps + [("server_opt", server_optimizer(config.server_optimizer))]


def build_strategy(
    config: StrategyConfig,
    *,
    sampling: CohortRule,
    population: int,
    noise_multiplier: float,
    seed: int,
    rounds: int,
    side_information: Updates | None = None,
    secure_sampler: bool = False,
    budget: PrivacyBudget | None = None,
) -> StrategyCore:
    """The StrategyCore of ``config``; ``side_information`` is AdaDPS's fixed A, if any; ``secure_sampler``, the
    noise from OpenDP (:func:`fedpub.strategies.common.secure_noise_sampler` says whether the config asks for it);
    ``budget``, the run's (ε, δ), which PPSGD's budget test reads (``noise_reference: tcdp``)."""
    scale = None
    if config.public_schedule is not None:
        rate = sampling.expected_cohort(population) / population
        scale = ppsgd.noise_test_scale(config.public_schedule, budget, rate, rounds, noise_multiplier)
    steps = strategy_steps(config, noise_multiplier, seed, rounds, side_information, sampling,
                           secure_sampler=secure_sampler, schedule_noise_scale=scale)
    return StrategyCore(
        config.name,
        named_chain(*steps),
        sampling,
        population,
        seed,
        config.public_clients_per_round,
        client_payloads=adadps.client_payloads(config.precondition),
        public_update_bound=config.public_update_limit * config.clip_norm,
    )
