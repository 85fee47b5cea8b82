"""Public users steer the budget and the clip norm (PPSGD: Wang & Zhou, AAAI 2020,
"Differentially private learning with small public data", Alg. 1; federated form in docs/design.md §4).

This step replaces the clip step: it clips every private update to C_t and hands C_t and z_t to the
noise step (outputs ``clip_norm`` and ``noise_multiplier``). From the public users' mean update Δ̄_pub it
sets the next round's values (d parameters, expected cohort m; the paper's symbols: ϕ for the budget
test, φ for the clip test):

* if ϕ‖Δ̄_pub‖ < k·sqrt(d)·z_t C_t / m (Alg. 1 line 13: the noise's norm on the mean dwarfs the signal),
  spend more budget: ρ_{t+1} = (1+α)ρ_t, i.e. z_{t+1} = z_t / sqrt(1+α) since ρ ∝ 1/z²; else z_{t+1} = z_t.
  An optional floor z_min stops the growth (the paper has none; it never raises a z_t already below it);
* if φ‖Δ̄_pub‖ < C_t (line 18), C_{t+1} = (1−β)C_t; else C_{t+1} = C_t.

**k, the noise the budget test compares with.** z_t·C_t/m is the std, per coordinate, of the noise this
run adds to the mean. The paper's test compares with the noise *its* mechanism adds, and its ϕ = 10 was
set for that noise. Its mechanism (Alg. 1 lines 7–8, eq. (3)–(4)) adds to the mean of a batch of s out of
M private samples N(0, 2C_t²/(s²ρ_t^s)) per coordinate, with ρ_t^s = ρ_t/(13 q²) (q = s/M: tCDP
amplification by sampling, Theorem 4) and Σ_t ρ_t ≤ ρ_total = ε + 2L − 2√(L(ε + L)), L = log(1/δ). A run
planned at a constant budget over T rounds has ρ_t = ρ_total/T, so its std per coordinate is

    σ_tCDP = (C_t/s)·q·sqrt(26·T/ρ_total),   against this run's   σ = z·C_t/s   (PLD-calibrated z),

and k = σ_tCDP/σ = q·sqrt(26·T/ρ_total)/z for the same (ε, δ, q, T): 2.5–11 at the (ε, q, T) of fedpub's
reproductions (the PLD accountant and add/remove neighbours give a much smaller z than tCDP's bounds and
replace-one sensitivity 2C/s). Both noises scale alike when the budget grows (σ ∝ 1/√ρ_t), so k is fixed
for the run: with k (``noise_test_scale``, :func:`tcdp_noise_ratio`) the test fires when the public signal
is small against the noise the paper would add, and the paper's ϕ keeps its meaning; k = 1 compares with
this run's own noise. The clip test reads no noise (C_t means the same in both), so φ needs no such factor.

Δ̄_pub is public, so the schedule costs no privacy; the accountant composes the rounds' different z_t. The
step declares z_0 for every round (the later z_t depend on the public users): the planned run is one of
constant noise, and the round driver prices each round's actual z_t before releasing it. The schedule reads
only public users, so the step prepares everything before the sum; per user it clips to C_t.
"""

from __future__ import annotations

import math
from typing import TypedDict

from fedpub import tree
from fedpub.step import Prepared, Releases, Step, user_step
from fedpub.steps.clip import clip_rows
from fedpub.types import Params, RoundContext, Updates


def tcdp_rho(epsilon: float, delta: float) -> float:
    """ρ_total of eq. (3): the tCDP budget whose (ε, δ) conversion (Theorem 2) is the target."""
    log_inv_delta = math.log(1 / delta)
    return epsilon + 2 * log_inv_delta - 2 * math.sqrt(log_inv_delta * (epsilon + log_inv_delta))


def tcdp_noise_ratio(epsilon: float, delta: float, sampling_rate: float, steps: int, noise_multiplier: float) -> float:
    """k = σ_tCDP/σ: the paper's per-coordinate noise std on the mean (its Gaussian mechanism under tCDP with
    amplification by sampling, constant budget ρ_total/T) over this run's z·C/s, for the same (ε, δ, q, T)."""
    for name, value in {"epsilon": epsilon, "sampling_rate": sampling_rate, "noise_multiplier": noise_multiplier}.items():
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
    if not 0 < delta < 1 or steps < 1:
        raise ValueError(f"need 0 < delta < 1 and steps >= 1, got {delta}, {steps}")
    return sampling_rate * math.sqrt(26 * steps / tcdp_rho(epsilon, delta)) / noise_multiplier


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
    noise_test_scale: float = 1.0,
    min_noise_multiplier: float | None = None,
) -> Step:
    """Clip to C_t; from the public mean, set z_{t+1} (budget growth α, test ϕ against k times the run's noise)
    and C_{t+1} (decay β, test φ); ``min_noise_multiplier`` None: no floor on z (the paper's)."""
    positive = {
        "initial_clip_norm": initial_clip_norm,
        "initial_noise_multiplier": initial_noise_multiplier,
        "budget_growth": budget_growth,
        "noise_test_factor": noise_test_factor,
        "clip_test_factor": clip_test_factor,
        "noise_test_scale": noise_test_scale,
    }
    for name, value in positive.items():
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
    if not 0 < clip_decay < 1:
        raise ValueError(f"clip_decay must be in (0, 1), got {clip_decay}")
    if min_noise_multiplier is not None and not (min_noise_multiplier >= 0 and math.isfinite(min_noise_multiplier)):
        raise ValueError(f"min_noise_multiplier must be a finite number >= 0 or None, got {min_noise_multiplier}")
    floor = 0.0 if min_noise_multiplier is None else min_noise_multiplier

    def init(params: Params) -> ScheduleState:
        return ScheduleState(clip_norm=float(initial_clip_norm), noise_multiplier=float(initial_noise_multiplier))

    def prepare(
        like: Params,
        state: ScheduleState,
        *,
        ctx: RoundContext,
        public_mean: Updates | None = None,
    ) -> Prepared:
        c, z = state["clip_norm"], state["noise_multiplier"]
        next_c, next_z, public_norm = c, z, None
        if public_mean is not None:
            public_norm = float(tree.global_norm(public_mean))
            d = sum(v.numel() for v in public_mean.values())
            weak = noise_test_factor * public_norm < noise_test_scale * math.sqrt(d) * z * c / ctx.expected_cohort
            if weak and z > floor:
                next_z = max(floor, z / math.sqrt(1 + budget_growth))
            if clip_test_factor * public_norm < c:
                next_c = (1 - clip_decay) * c
        metrics = {
            "clip_norm": c,
            "noise_multiplier": z,
            "next_clip_norm": next_c,
            "next_noise_multiplier": next_z,
            # a round without a usable public update has no public norm: left out rather than released as NaN
            **({} if public_norm is None else {"public_norm": public_norm}),
        }
        return Prepared(
            ScheduleState(clip_norm=next_c, noise_multiplier=next_z),
            {"clip_norm": c},
            {"clip_norm": c, "noise_multiplier": z},
            metrics,
        )

    def releases(round_index: int) -> Releases:
        return Releases(outputs={"noise_multiplier": float(initial_noise_multiplier)})

    return user_step(prepare, apply=clip_rows, init=init, optional_inputs=("public_mean",),
                     outputs=("clip_norm", "noise_multiplier"), releases=releases)
