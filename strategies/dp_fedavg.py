"""User-level DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent language
models"): Poisson cohort of private users, clip each update to C, sum, add N(0, z²C²), divide by
the expected cohort m = qN, then the server optimizer (SGD+momentum = DP-FedAvgM, Adam =
DP-FedAdam, Reddi et al. 2021). Optionally C adapts to a quantile of the norms (Andrew et al. 2021);
its noisy count is a second Gaussian release on the same cohort, so a round costs one Gaussian of
z_eff = (z⁻² + σ_b⁻²)^(−1/2) (the steps declare both releases; a target ε calibrates the sum's z with the
count's noise in the plan). Every recipe shares this private mean (``fedpub.recipe_registry.PRIVATE_MEAN``). With
``secure_sampler`` (``privacy.noise_sampler: opendp``, see :func:`fedpub.strategies.common.secure_noise_sampler`) both
Gaussian releases are drawn by OpenDP instead of torch."""

from __future__ import annotations

from fedpub.step import Step
from fedpub.steps.adaptive_clip import adaptive_clip
from fedpub.steps.aggregate import aggregate
from fedpub.steps.clip import clip
from fedpub.steps.gaussian_noise import gaussian_noise
from fedpub.steps.server_opt import server_adam, server_sgd
from fedpub.strategies.build_context import BuildContext


def clip_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """Clip each update to the fixed C."""
    return [("clip", clip(ctx.config.clip_norm))]


def adaptive_clip_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """Clip to a C adapted to a quantile of the norms (Andrew et al.), ``clip_norm`` the initial C."""
    config = ctx.config
    adaptive = config.adaptive_clip
    step = adaptive_clip(config.clip_norm, adaptive.target_quantile, adaptive.learning_rate, adaptive.count_noise_std,
                         ctx.seed, secure_sampler=ctx.secure_sampler)
    return [("clip", step)]


def aggregate_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """Sum the clipped updates and divide by the expected cohort m."""
    return [("aggregate", aggregate())]


def noise_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """The Gaussian N(0, z²C²) on the sum (÷ m)."""
    return [("noise", gaussian_noise(ctx.noise_multiplier, ctx.seed, secure_sampler=ctx.secure_sampler))]


def server_optimizer_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """The server's step on the private mean: SGD (with momentum) or Adam."""
    config = ctx.config.server_optimizer
    if config.name == "adam":
        return [("server_opt", server_adam(config.lr, config.beta1, config.beta2, config.eps))]
    return [("server_opt", server_sgd(config.lr, config.momentum))]
