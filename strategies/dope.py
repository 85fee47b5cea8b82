"""DOPE-SGD in federated form (Nasr et al. 2023, "Effectively using public data in privacy
preserving machine learning", Alg. 2, eq. 2 and Table 7): each round a few public users train
too, and the private updates are clipped around their mean update c_t (clipped to λ):
Δ̄ = c_t + (Σ_k clip(Δ_k − c_t, C) + N(0, z²C²)) / m. The center is added outside the noisy sum, so
the mechanism, its sensitivity C and its accounting are DP-FedAvg's; with c_t = 0 it is DP-FedAvg.
"""

from __future__ import annotations

from fedpub.config import DopeConfig
from fedpub.privacy.events import Sampling
from fedpub.step import named_chain
from fedpub.steps.recenter import add_center, recenter
from fedpub.strategy import StrategyCore
from strategies.dp_fedavg import private_mean_steps, server_optimizer


def build(
    config: DopeConfig,
    *,
    sampling: Sampling,
    population: int,
    noise_multiplier: float,
    seed: int,
) -> StrategyCore:
    """recenter → clip → aggregate (÷ m) → noise → add the center → server optimizer."""
    aggregator = named_chain(
        ("recenter", recenter(config.center_clip)),
        *private_mean_steps(config, noise_multiplier, seed),
        ("add_center", add_center()),
        ("server_opt", server_optimizer(config.server_optimizer)),
    )
    return StrategyCore("dope", aggregator, sampling, population, seed, config.public_clients_per_round)
