"""More budget in a few rounds (seed 001; Ganesh et al. 2023, Table 2) as a recipe part: the boosted rounds, the
first or the last ``boosted_rounds`` of the run, hand the noise step a smaller z (:mod:`fedpub.steps.budget_schedule`).
"""

from __future__ import annotations

from fedpub.config import BudgetScheduleConfig
from fedpub.step import Step
from fedpub.steps.budget_schedule import budget_schedule
from fedpub.strategies.build_context import BuildContext


def boosted_rounds(schedule: BudgetScheduleConfig, rounds: int) -> range:
    """The rounds that spend more budget: the first or the last ``boosted_rounds``."""
    if schedule.boosted_rounds >= rounds:
        raise ValueError(
            f"strategy.budget_schedule.boosted_rounds={schedule.boosted_rounds} must be fewer than the "
            f"{rounds} rounds"
        )
    k = schedule.boosted_rounds
    return range(k) if schedule.position == "first" else range(rounds - k, rounds)


def budget_schedule_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """The step before the clip that sets the boosted rounds' z."""
    schedule = ctx.config.budget_schedule
    boosted_z = schedule.boosted_z(ctx.noise_multiplier)
    return [("budget_schedule", budget_schedule(boosted_rounds(schedule, ctx.rounds), boosted_z))]
