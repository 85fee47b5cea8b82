"""User-level DP-FedAvg (McMahan et al. 2018, "Learning differentially private recurrent language
models"): Poisson cohort of private users, clip each update to C, sum, add N(0, z²C²), divide by
the expected cohort m = qN, then the server optimizer (SGD+momentum = DP-FedAvgM, Adam =
DP-FedAdam, Reddi et al. 2021)."""

from __future__ import annotations

from fedpub.config import DpFedAvgConfig, ServerOptimizerConfig
from fedpub.privacy.events import Sampling
from fedpub.step import Step, named_chain
from fedpub.steps.aggregate import aggregate
from fedpub.steps.clip import clip
from fedpub.steps.gaussian_noise import gaussian_noise
from fedpub.steps.server_opt import server_adam, server_sgd
from fedpub.strategy import StrategyCore


def server_optimizer(config: ServerOptimizerConfig) -> Step:
    if config.name == "adam":
        return server_adam(config.lr, config.beta1, config.beta2, config.eps)
    return server_sgd(config.lr, config.momentum)


def build(
    config: DpFedAvgConfig,
    *,
    sampling: Sampling,
    population: int,
    noise_multiplier: float,
    seed: int,
) -> StrategyCore:
    """The DP-FedAvg recipe: clip → aggregate (÷ m) → Gaussian noise → server optimizer."""
    aggregator = named_chain(
        ("clip", clip(config.clip_norm)),
        ("aggregate", aggregate()),
        ("noise", gaussian_noise(noise_multiplier, seed)),
        ("server_opt", server_optimizer(config.server_optimizer)),
    )
    return StrategyCore("dp_fedavg", aggregator, sampling, population, seed)
