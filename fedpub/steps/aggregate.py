"""Sum the cohort's (clipped) updates and divide by the *expected* cohort size m = qN.

Dividing by the fixed m, not by the number of clients that replied, is what keeps the average a
post-processing of the noisy sum: the realised count would leak membership (McMahan et al. 2018,
estimator f_f; docs/design.md §3). This step is the cut between the per-user steps and those after the sum: it
divides the users' sum, formed wherever they are (docs/design.md §9), or sums a cohort's own rows.
"""

from __future__ import annotations

from fedpub.step import EmptyState, Step, StepResult, UserSum, cut_step
from fedpub.types import RoundContext, Updates


def aggregate() -> Step:
    """The cohort's updates -> Σ_k u_k / m, with m = ``ctx.expected_cohort``."""

    def cut(total: UserSum, state: EmptyState, *, ctx: RoundContext) -> StepResult:
        if not ctx.expected_cohort > 0:
            raise ValueError(f"expected_cohort must be > 0, got {ctx.expected_cohort}")
        mean: Updates = total.updates.sum(times=1.0 / ctx.expected_cohort)  # tree.scale's values, in the sum's pass
        return StepResult(
            mean, state, {"expected_cohort": ctx.expected_cohort}, diagnostics={"cohort_size": float(total.users)}
        )

    return cut_step(cut)
