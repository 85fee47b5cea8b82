"""User-level DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent language
models"): Poisson cohort of private users, clip each update to C, sum, add N(0, z²C²), divide by
the expected cohort m = qN, then the server optimizer (SGD+momentum = DP-FedAvgM, Adam =
DP-FedAdam, Reddi et al. 2021). Optionally C adapts to a quantile of the norms (Andrew et al. 2021);
its noisy count is a second Gaussian release on the same cohort, so a round costs one Gaussian of
z_eff = (z⁻² + σ_b⁻²)^(−1/2) (the steps declare both releases; a target ε calibrates the sum's z with the
count's noise in the plan). Every recipe shares this private mean (``strategies/compose.py``). With
``secure_sampler`` (``privacy.noise_sampler: opendp``, see :func:`fedpub.strategies.common.secure_noise_sampler`) both
Gaussian releases are drawn by OpenDP instead of torch."""

from __future__ import annotations

from fedpub.config import ServerOptimizerConfig, StrategyConfig
from fedpub.step import Step
from fedpub.steps.adaptive_clip import adaptive_clip
from fedpub.steps.aggregate import aggregate
from fedpub.steps.clip import clip
from fedpub.steps.gaussian_noise import gaussian_noise
from fedpub.steps.server_opt import server_adam, server_sgd
from fedpub.strategies import ppsgd


def server_optimizer(config: ServerOptimizerConfig) -> Step:
    if config.name == "adam":
        return server_adam(config.lr, config.beta1, config.beta2, config.eps)
    return server_sgd(config.lr, config.momentum)


def clip_step(config: StrategyConfig, noise_multiplier: float, seed: int, *, secure_sampler: bool = False,
              schedule_noise_scale: float = 1.0) -> Step:
    """Fixed C, or C adapted to a quantile (Andrew et al.), or C and z steered by public users (PPSGD, its budget
    test against ``schedule_noise_scale`` times the run's noise: :func:`fedpub.strategies.ppsgd.noise_test_scale`)."""
    adaptive = config.adaptive_clip
    if config.public_schedule is not None:
        return ppsgd.schedule_step(config.public_schedule, config.clip_norm, noise_multiplier, schedule_noise_scale)
    if adaptive is not None:
        return adaptive_clip(
            config.clip_norm, adaptive.target_quantile, adaptive.learning_rate, adaptive.count_noise_std, seed,
            secure_sampler=secure_sampler,
        )
    return clip(config.clip_norm)


def private_mean_steps(
    config: StrategyConfig, noise_multiplier: float, seed: int, *, secure_sampler: bool = False,
    schedule_noise_scale: float = 1.0,
) -> list[tuple[str, Step]]:
    """clip → aggregate (÷ m) → Gaussian noise: the private mean every recipe shares."""
    return [
        ("clip", clip_step(config, noise_multiplier, seed, secure_sampler=secure_sampler,
                           schedule_noise_scale=schedule_noise_scale)),
        ("aggregate", aggregate()),
        ("noise", gaussian_noise(noise_multiplier, seed, secure_sampler=secure_sampler)),
    ]
