"""A strategy config, the privacy settings and the population give everything a round driver needs.

Shared by every experiment (:func:`build_experiment_strategy`, over the users its config loads) and the drop-in
Flower constructor (:meth:`fedpub.strategies.flower.FedpubStrategy.from_config`), so a config means the same mechanism
wherever it runs: the cohort rule over the N private users, the noise multiplier (given, or calibrated to the
target ε over the planned run), AdaDPS's side information, the recipe's :class:`~fedpub.strategy.StrategyCore`,
the accountant and the budget. The planned run is what the recipe's steps declare (``Step.releases``) composed
over the rounds: calibration gets it as a function of the noise multiplier, so boosted rounds, a noisy count or
tree aggregation are priced from the step that releases them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
import dp_accounting
import torch

from fedpub import recipe_registry
from fedpub.config import ExperimentConfig, PrivacyConfig, StrategyConfig
from fedpub.data import registry
from fedpub.data.base import FederatedDataset
from fedpub.data.spec import resolve
from fedpub.data.users import FederatedData
from fedpub.models.seeded import model_params, new_model
from fedpub.privacy.accountant import PrivacyBudget, UserLevelAccountant, check_first_round
from fedpub.privacy.calibration import calibrate
from fedpub.privacy.errors import BudgetExceededError, PrivacyError
from fedpub.privacy.events import CohortRule, neighboring_relation
from fedpub.privacy.randomness import PrivacyRandomness
from fedpub.strategy import StrategyCore
from fedpub.types import Updates
from fedpub.strategies import adadps
from fedpub.strategies.common import make_sampling, secure_noise_sampler
from fedpub.strategies.compose import build_strategy


@dataclass(frozen=True)
class PrivateStrategy:
    """A recipe ready to run: its core, the noise multiplier it resolved to, the planned event of the whole run
    (every round composed) and the ε budget that stops it (None: none)."""

    core: StrategyCore
    noise_multiplier: float
    planned_event: dp_accounting.DpEvent
    budget_epsilon: float | None
    privacy: PrivacyConfig
    core_with_seed: Callable[[int], StrategyCore]
    """The same recipe and noise multiplier with another privacy seed (a resumed secret run's)."""

    def new_accountant(self) -> UserLevelAccountant:
        return new_accountant(self.privacy, self.core.sampling)


def new_accountant(privacy: PrivacyConfig, rule: CohortRule) -> UserLevelAccountant:
    """An empty accountant of ``privacy``'s kind under the neighbouring relation the cohort ``rule`` is priced in."""
    return UserLevelAccountant(privacy.accountant, neighboring_relation(rule))


def privacy_budget(strategy: StrategyConfig, privacy: PrivacyConfig) -> float | None:
    """privacy.budget_epsilon; for a public schedule (PPSGD, which spends until the budget is gone)
    the target ε when no budget is given."""
    if privacy.budget_epsilon is not None or strategy.public_schedule is None:
        return privacy.budget_epsilon
    if strategy.target_epsilon is None:
        raise ValueError(
            "strategy.public_schedule spends the budget faster as it goes: give strategy.target_epsilon "
            "or privacy.budget_epsilon"
        )
    return strategy.target_epsilon


def build_private_strategy(
    strategy: StrategyConfig,
    privacy: PrivacyConfig,
    *,
    population: int,
    rounds: int,
    seed: int,
    reproducible: bool,
    side_information: Updates | None = None,
) -> PrivateStrategy:
    """The recipe of ``strategy`` over ``population`` private users for ``rounds`` rounds, its noise and cohorts
    drawn from the privacy ``seed`` (:mod:`fedpub.privacy.randomness`; ``reproducible`` when whoever holds the
    config knows it, which rules out the secure noise sampler). Raises (naming the
    field) when δ is not below 1/N, when the accountant cannot price the planned run or when its first round alone
    exceeds the budget."""
    check_delta(privacy.delta, population)
    sampling = make_sampling(strategy.sampling, population)
    secure = secure_noise_sampler(privacy.noise_sampler, reproducible=reproducible)
    budget_epsilon = privacy_budget(strategy, privacy)
    budget = None if budget_epsilon is None else PrivacyBudget(budget_epsilon, privacy.delta)

    def core_for(noise_multiplier: float, privacy_seed: int = seed) -> StrategyCore:
        return build_strategy(
            strategy, sampling=sampling, population=population, noise_multiplier=noise_multiplier,
            seed=privacy_seed, rounds=rounds, side_information=side_information, secure_sampler=secure,
            budget=budget,
        )

    def planned(noise_multiplier: float) -> dp_accounting.DpEvent:
        return core_for(noise_multiplier).planned_event(rounds)

    z = strategy.noise_multiplier
    accountant = new_accountant(privacy, sampling)
    try:
        accountant.check_supported(planned(1.0 if z is None else z))
    except PrivacyError as error:
        raise PrivacyError(f"privacy.accountant: {error}") from None
    if z is None:
        z = calibrate(planned, accountant.neighboring_relation, strategy.target_epsilon, privacy.delta,
                      privacy.accountant)
    core = core_for(z)
    built = PrivateStrategy(
        core, z, core.planned_event(rounds), budget_epsilon, privacy,
        core_with_seed=lambda privacy_seed: core_for(z, privacy_seed),
    )
    if built.budget_epsilon is not None:
        field = "privacy.budget_epsilon" if privacy.budget_epsilon is not None else "strategy.target_epsilon"
        try:
            check_first_round(
                PrivacyBudget(built.budget_epsilon, privacy.delta), accountant, core.planned_round_event(0)
            )
        except BudgetExceededError as error:
            raise BudgetExceededError(f"{field}: {error}") from None
    return built


def check_delta(delta: float, population: int) -> None:
    """Refuse δ ≥ 1/N: a mechanism that publishes one random private user's data whole is (0, 1/N)-DP, so such a δ
    lets a run meet its (ε, δ) while giving away a user."""
    if population > 0 and delta * population >= 1:
        suggested = 10.0 ** math.floor(math.log10(1 / (10 * population)))
        raise PrivacyError(
            f"privacy.delta {delta:g} is not below 1/N = 1/{population} = {1 / population:.3g} (N the private "
            "population): with δ ≥ 1/N, a release of one randomly chosen user's data, whole, meets (ε, δ). Set "
            f"privacy.delta below 1/N, e.g. {suggested:g} (δ ≪ 1/N)"
        )


def side_information(config: ExperimentConfig, train: FederatedDataset) -> Updates | None:
    """AdaDPS's fixed preconditioner from the token frequencies of the dataset's vocabulary, when the config asks
    for it: on the model's bag-of-words weight (both as their declarations name them)."""
    precondition = config.strategy.precondition
    if precondition is None or precondition.source != "token_frequency":
        return None
    dataset, _ = registry.source(config.data.source)
    weight = registry.model(config.model.name).bag_of_words_weight
    if dataset.token_frequencies is None or weight is None:
        models = [m.name for d in registry.DATASETS for m in d.models if m.bag_of_words_weight is not None]
        sources = registry.sources_where(lambda d, s: d.token_frequencies is not None)
        raise ValueError(
            "strategy.precondition.source `token_frequency` preconditions the bag-of-words weight of a model that "
            f"has one (model.name {' | '.join(models)}) by the token counts of a dataset's vocabulary (data.source "
            f"{' | '.join(sources)}), not model {config.model.name} on data.source {config.data.source}"
        )
    counts = resolve(dataset.token_frequencies)(config)
    params = model_params(new_model(config, train.num_classes, torch.device("cpu")))  # names and shapes
    return adadps.token_frequency_side_information(precondition, params, counts, weight_name=weight, seed=config.seed)


def build_experiment_strategy(
    config: ExperimentConfig, data: FederatedData, *, randomness: PrivacyRandomness
) -> PrivateStrategy:
    """The recipe of ``config`` over the private users of ``data`` for ``config.rounds`` rounds, with its side
    information, its noise and cohorts drawn from ``randomness``. Raises (naming the field) as
    :func:`build_private_strategy` does, and when the recipe trains public users the data does not have."""
    strategy = config.strategy
    built = build_private_strategy(
        strategy, config.privacy, population=len(data.private_ids), rounds=config.rounds, seed=randomness.seed,
        reproducible=not randomness.secret,
        side_information=side_information(config, data.train),
    )
    if built.core.public_cohort and not data.public_ids:
        raise ValueError(f"strategy `{strategy.name}` trains public users, but the data has none: set data.public")
    phases = recipe_registry.public_phases(strategy)
    if phases and not data.public_ids:
        verb = "trains" if len(phases) == 1 else "train"
        raise ValueError(f"strategy.{' and strategy.'.join(phases)} {verb} on public users: set data.public")
    return built
