"""What a recipe part's step builders read: the strategy config and the run it is built for (one argument instead
of the run's figures threaded through every builder; :mod:`fedpub.recipe_spec`)."""

from __future__ import annotations

from dataclasses import dataclass

from fedpub.config import StrategyConfig
from fedpub.privacy.accountant import PrivacyBudget
from fedpub.privacy.events import CohortRule
from fedpub.types import Updates


@dataclass(frozen=True)
class BuildContext:
    """A strategy being built: ``config`` for ``population`` private users drawn by ``sampling`` over ``rounds``
    rounds, noised with ``noise_multiplier`` from the privacy ``seed``."""

    config: StrategyConfig
    sampling: CohortRule
    population: int
    noise_multiplier: float
    seed: int
    rounds: int
    side_information: Updates | None = None
    """AdaDPS's fixed A (token frequencies), if any."""
    secure_sampler: bool = False
    """The private mean's Gaussian noise drawn by OpenDP (``privacy.noise_sampler: opendp``)."""
    budget: PrivacyBudget | None = None
    """The run's (ε, δ), which PPSGD's budget test reads (``noise_reference: tcdp``)."""
