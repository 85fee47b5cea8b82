"""PPSGD in federated form (Wang & Zhou 2020, "Differentially private learning with small public
data", Alg. 1): each round the public users' mean update steers the next round — when it is small
against the noise (ϕ‖Δ̄_pub‖ < k·sqrt(d)·z_t C_t/m) the budget per round grows (z ← z/sqrt(1+α)), when
it is small against the clip (φ‖Δ̄_pub‖ < C_t) the clip shrinks (C ← (1−β)C). The rounds' Gaussians
of different z are composed by the PLD/RDP accountant (not the paper's tCDP) and the run stops
before the budget would be exceeded; then the model is reused: fine-tuned on public data with
λ‖w − w_T‖² (a run phase, :mod:`fedpub.run_phases`).

The defaults are the paper's (α = β = 0.3, ϕ = 10, φ = 100, no floor on z). ϕ was set for the paper's
noise, which for the same (ε, δ, q, T) is k = q·sqrt(26T/ρ_total)/z times this run's per coordinate
(the derivation is in :mod:`fedpub.steps.public_schedule`): with ``noise_reference: tcdp`` the test reads
k times the run's noise std, so it fires when the paper's would; ``run`` reads the run's own (k = 1).
"""

from __future__ import annotations

from fedpub.config import PublicScheduleConfig
from fedpub.privacy.accountant import PrivacyBudget
from fedpub.step import Step
from fedpub.steps.public_schedule import public_schedule, tcdp_noise_ratio
from fedpub.strategies.build_context import BuildContext


def noise_test_scale(
    config: PublicScheduleConfig, budget: PrivacyBudget | None, sampling_rate: float, rounds: int,
    noise_multiplier: float,
) -> float:
    """k of the budget test: σ_tCDP/σ for the run's (ε, δ, q, rounds, z) (``noise_reference: tcdp``), or 1."""
    if config.noise_reference == "run":
        return 1.0
    if budget is None:
        raise ValueError(
            "strategy.public_schedule.noise_reference `tcdp` reads the budget test against the paper's noise for the "
            "run's (ε, δ): give strategy.target_epsilon or privacy.budget_epsilon, or set noise_reference: run"
        )
    return tcdp_noise_ratio(budget.epsilon, budget.delta, sampling_rate, rounds, noise_multiplier)


def schedule_step(config: PublicScheduleConfig, clip_norm: float, noise_multiplier: float,
                  noise_scale: float) -> Step:
    """The step that clips to C_t, hands z_t to the noise and sets (C_{t+1}, z_{t+1}); ``noise_scale`` is k."""
    return public_schedule(
        clip_norm,
        noise_multiplier,
        budget_growth=config.budget_growth,
        clip_decay=config.clip_decay,
        noise_test_factor=config.noise_test_factor,
        clip_test_factor=config.clip_test_factor,
        noise_test_scale=noise_scale,
        min_noise_multiplier=config.min_noise_multiplier,
    )


def schedule_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """The clip slot of the private mean: the schedule's step, its budget test against k times the run's noise (k
    from the run's budget and sampling rate, :func:`noise_test_scale`)."""
    config = ctx.config
    rate = ctx.sampling.expected_cohort(ctx.population) / ctx.population
    scale = noise_test_scale(config.public_schedule, ctx.budget, rate, ctx.rounds, ctx.noise_multiplier)
    return [("clip", schedule_step(config.public_schedule, config.clip_norm, ctx.noise_multiplier, scale))]
