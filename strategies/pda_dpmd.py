"""PDA-DPMD in federated form (Amid et al. 2022, "Public data-assisted mirror descent for private
model training", eq. (1) and App. F.1): the server step mixes the noisy private mean update with
the public users' mean update, g_t = α_t·Δ̄_priv + (1 − α_t)·Δ̄_pub, α_t = cos(πt/2K) down to a
floor. The public part is post-processing: the mechanism and its accounting are DP-FedAvg's, and
α_t = 1 is DP-FedAvg exactly. ``mirror.public_term: false`` drops the public mean (g_t = α_t·Δ̄_priv, no public
users trained each round): the control "α-damped DP-FedAvg".
"""

from __future__ import annotations

from fedpub.step import Step
from fedpub.steps.mirror import mirror
from fedpub.strategies.build_context import BuildContext


def mirror_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """The mix, placed after the noise (K defaults to the run's rounds)."""
    config = ctx.config.mirror
    return [("mirror", mirror(config.decay_rounds or ctx.rounds, config.alpha_floor, public_term=config.public_term))]
