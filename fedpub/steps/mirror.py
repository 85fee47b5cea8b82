"""Public mirror steps (PDA-DPMD: Amid, Ganesh, Mathews, Ramaswamy, Song, Steinke, Suriyakumar, Thakkar,
Thakurta 2022, "Public data-assisted mirror descent for private model training", eq. (1) and App. F.1).

The first-order form of mirror descent with the public loss as mirror map mixes the noisy private
mean with the public users' mean update: g_t = α_t Δ̄_priv + (1 − α_t) Δ̄_pub, with the cosine schedule
α_t = cos(π t / (2K)). The paper leaves open what follows round K; here α_t = max(floor, cos(π min(t, K) / (2K))),
so α decays to the floor at t = K and stays there (floor 0: only public steps after K). Mixing in public
updates is post-processing of the private release: no privacy cost. α_t = 1 is DP-FedAvg.
"""

from __future__ import annotations

import math

from fedpub import tree
from fedpub.step import EmptyState, Step, stateless
from fedpub.types import RoundContext, StepResult, Updates


def mirror_alpha(round_index: int, decay_rounds: int, alpha_floor: float) -> float:
    """α_t = max(floor, cos(π·min(t, K) / (2K))): 1 at t = 0, the floor from t = K on."""
    return max(alpha_floor, math.cos(math.pi * min(round_index, decay_rounds) / (2 * decay_rounds)))


def mirror(decay_rounds: int, alpha_floor: float = 0.0) -> Step:
    """Mix the noisy private mean with the public mean: α_t Δ̄_priv + (1 − α_t) Δ̄_pub (t = ``ctx.round``)."""
    if decay_rounds < 1 or not 0 <= alpha_floor <= 1:
        raise ValueError(
            f"mirror needs decay_rounds >= 1 and 0 <= alpha_floor <= 1, got {decay_rounds}, {alpha_floor}"
        )

    def update(
        updates: Updates, state: EmptyState, *, ctx: RoundContext, public_mean: Updates | None = None
    ) -> StepResult:
        alpha = 1.0 if public_mean is None else mirror_alpha(ctx.round, decay_rounds, alpha_floor)
        if alpha == 1.0:
            return StepResult(updates, state, {"alpha": alpha})
        mixed = tree.add(tree.scale(updates, alpha), tree.scale(public_mean, 1 - alpha))
        return StepResult(mixed, state, {"alpha": alpha})

    return stateless(update, optional_inputs=("public_mean",))
