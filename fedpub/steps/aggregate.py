"""Sum the cohort's (clipped) updates and divide by the *expected* cohort size m = qN.

Dividing by the fixed m, not by the number of clients that replied, is what keeps the average a
post-processing of the noisy sum: the realised count would leak membership (McMahan et al. 2018,
estimator f_f; DESIGN.md §3).
"""

from __future__ import annotations

from fedpub.cohort_updates import Cohort
from fedpub.step import EmptyState, Step, stateless
from fedpub.types import RoundContext, StepResult, Updates


def aggregate() -> Step:
    """The cohort's updates -> Σ_k u_k / m, with m = ``ctx.expected_cohort``."""

    def update(updates: Cohort, state: EmptyState, *, ctx: RoundContext) -> StepResult:
        if not ctx.expected_cohort > 0:
            raise ValueError(f"expected_cohort must be > 0, got {ctx.expected_cohort}")
        mean: Updates = updates.sum(times=1.0 / ctx.expected_cohort)  # tree.scale's values, in the sum's pass
        return StepResult(
            mean, state, {"expected_cohort": ctx.expected_cohort}, diagnostics={"cohort_size": float(len(updates))}
        )

    return stateless(update)
