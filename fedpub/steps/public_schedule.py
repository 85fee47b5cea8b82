"""Public users steer the budget and the clip norm (PPSGD: Wang & Zhou, AAAI 2020,
"Differentially private learning with small public data", Alg. 1; federated form in DESIGN.md §4).

This step replaces the clip step: it clips every private update to C_t and hands C_t and z_t to the
noise step (outputs ``clip_norm`` and ``noise_multiplier``). From the public users' mean update Δ̄_pub it
sets the next round's values (d parameters, expected cohort m):

* if φ‖Δ̄_pub‖ < sqrt(d)·z_t C_t / m (the noise's norm on the mean dwarfs the signal), spend more budget:
  ρ_{t+1} = (1+α)ρ_t, i.e. z_{t+1} = max(z_min, z_t / sqrt(1+α)) since ρ ∝ 1/z²; else z_{t+1} = z_t
  (the floor z_min stops the growth; it never raises a z_t already below it);
* if ϕ‖Δ̄_pub‖ < C_t, C_{t+1} = (1−β)C_t; else C_{t+1} = C_t.

Δ̄_pub is public, so the schedule costs no privacy; the accountant composes the rounds' different z_t. The
step declares z_0 for every round (the later z_t depend on the public users): the planned run is one of
constant noise, and the round driver prices each round's actual z_t before releasing it.
"""

from __future__ import annotations

import math
from typing import TypedDict

from fedpub import tree
from fedpub.cohort_updates import Cohort
from fedpub.step import Releases, Step
from fedpub.steps.clip import clip_factors, norm_diagnostics
from fedpub.types import Params, RoundContext, StepResult, Updates


class ScheduleState(TypedDict):
    """C_t and z_t."""

    clip_norm: float
    noise_multiplier: float


def public_schedule(
    initial_clip_norm: float,
    initial_noise_multiplier: float,
    *,
    budget_growth: float,
    clip_decay: float,
    noise_test_factor: float,
    clip_test_factor: float,
    min_noise_multiplier: float = 0.3,
) -> Step:
    """Clip to C_t; from the public mean, set z_{t+1} (budget growth α, test φ) and C_{t+1} (decay β, test ϕ)."""
    positive = {
        "initial_clip_norm": initial_clip_norm,
        "initial_noise_multiplier": initial_noise_multiplier,
        "budget_growth": budget_growth,
        "noise_test_factor": noise_test_factor,
        "clip_test_factor": clip_test_factor,
    }
    for name, value in positive.items():
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
    if not 0 < clip_decay < 1:
        raise ValueError(f"clip_decay must be in (0, 1), got {clip_decay}")
    if not (min_noise_multiplier >= 0 and math.isfinite(min_noise_multiplier)):
        raise ValueError(f"min_noise_multiplier must be a finite number >= 0, got {min_noise_multiplier}")

    def init(params: Params) -> ScheduleState:
        return ScheduleState(clip_norm=float(initial_clip_norm), noise_multiplier=float(initial_noise_multiplier))

    def update(
        updates: Cohort,
        state: ScheduleState,
        *,
        ctx: RoundContext,
        public_mean: Updates | None = None,
    ) -> StepResult:
        c, z = state["clip_norm"], state["noise_multiplier"]
        norms = updates.norms()
        clipped = updates.scale(clip_factors(norms, c))
        next_c, next_z, public_norm = c, z, math.nan
        if public_mean is not None:
            public_norm = float(tree.global_norm(public_mean))
            d = sum(v.numel() for v in public_mean.values())
            weak = noise_test_factor * public_norm < math.sqrt(d) * z * c / ctx.expected_cohort
            if weak and z > min_noise_multiplier:
                next_z = max(min_noise_multiplier, z / math.sqrt(1 + budget_growth))
            if clip_test_factor * public_norm < c:
                next_c = (1 - clip_decay) * c
        metrics = {
            "clip_norm": c,
            "noise_multiplier": z,
            "next_clip_norm": next_c,
            "next_noise_multiplier": next_z,
            "public_norm": public_norm,
        }
        return StepResult(
            clipped,
            ScheduleState(clip_norm=next_c, noise_multiplier=next_z),
            metrics,
            outputs={"clip_norm": c, "noise_multiplier": z},
            diagnostics=norm_diagnostics(norms, c),
        )

    def releases(round_index: int) -> Releases:
        return Releases(outputs={"noise_multiplier": float(initial_noise_multiplier)})

    return Step(init, update, optional_inputs=("public_mean",), outputs=("clip_norm", "noise_multiplier"),
                releases=releases)
