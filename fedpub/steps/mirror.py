"""Public mirror steps (PDA-DPMD: Amid, Ganesh, Mathews, Ramaswamy, Song, Steinke, Suriyakumar, Thakkar,
Thakurta 2022, "Public data-assisted mirror descent for private model training", Algorithm 1, eq. (1) and
App. F.1). Two forms, both post-processing of the private release (no privacy cost):

* :func:`mirror`, the first-order form (eq. (1), App. F.1) fedpub's federated recipe uses: it mixes the noisy
  private mean with the public users' mean update, g_t = α_t Δ̄_priv + (1 − α_t) Δ̄_pub, with the cosine
  schedule α_t = cos(π t / (2K)). The paper leaves open what follows round K; here
  α_t = max(floor, cos(π min(t, K) / (2K))), so α decays to the floor at t = K and stays there (floor 0: only
  public steps after K). α_t = 1 is DP-FedAvg. Without the public term (``public_term=False``) the step is
  α_t Δ̄_priv: the control "α-damped DP-FedAvg" (fedpub issue 36), the same schedule damping the noisy step, so
  what PDA-DPMD gains over it is the public mean's, not the damping's.
* :func:`quadratic_mirror`, the exact step when the public loss is quadratic (Ψ(θ) = ½θᵀHθ + linear, e.g. least
  squares, §3 and App. E): ∇Ψ*(∇Ψ(θ_t) − η g) = θ_t − η H⁻¹ g, so the step maps the noisy gradient g to P·g with
  P the given (scaled) inverse public Hessian. P = I is DP-SGD.
"""

from __future__ import annotations

import math

import torch

from fedpub import tree
from fedpub.step import EmptyState, Step, StepResult, after_sum_step
from fedpub.types import RoundContext, Updates


def mirror_alpha(round_index: int, decay_rounds: int, alpha_floor: float) -> float:
    """α_t = max(floor, cos(π·min(t, K) / (2K))): 1 at t = 0, the floor from t = K on."""
    return max(alpha_floor, math.cos(math.pi * min(round_index, decay_rounds) / (2 * decay_rounds)))


def mirror(decay_rounds: int, alpha_floor: float = 0.0, *, public_term: bool = True) -> Step:
    """Mix the noisy private mean with the public mean: α_t Δ̄_priv + (1 − α_t) Δ̄_pub (t = ``ctx.round``; a round
    without public updates: Δ̄_priv). ``public_term=False``: α_t Δ̄_priv, whether or not a public mean is given."""
    if decay_rounds < 1 or not 0 <= alpha_floor <= 1:
        raise ValueError(
            f"mirror needs decay_rounds >= 1 and 0 <= alpha_floor <= 1, got {decay_rounds}, {alpha_floor}"
        )

    def update(
        updates: Updates, state: EmptyState, *, ctx: RoundContext, public_mean: Updates | None = None
    ) -> StepResult:
        public = public_mean if public_term else None
        alpha = 1.0 if public is None and public_term else mirror_alpha(ctx.round, decay_rounds, alpha_floor)
        if alpha == 1.0:
            return StepResult(updates, state, {"alpha": alpha})
        damped = tree.scale(updates, alpha)
        mixed = damped if public is None else tree.add(damped, tree.scale(public, 1 - alpha))
        return StepResult(mixed, state, {"alpha": alpha})

    return after_sum_step(update, optional_inputs=("public_mean",))


def quadratic_mirror(preconditioner: torch.Tensor) -> Step:
    """The exact mirror step of a quadratic public loss: g ↦ P·g with P = ``preconditioner`` (symmetric p × p, the
    inverse public Hessian up to a scale the learning rate absorbs). The p parameters are the tree's leaves
    flattened and concatenated in key order; a tree of one leaf may carry leading dimensions (several models
    at once, as the linear-regression reproduction trains its grid), P acting on the last."""
    if preconditioner.dim() != 2 or preconditioner.shape[0] != preconditioner.shape[1]:
        raise ValueError(f"the preconditioner must be a square matrix, got shape {tuple(preconditioner.shape)}")
    if not torch.allclose(preconditioner, preconditioner.T):
        raise ValueError("the preconditioner must be symmetric (the inverse Hessian of a quadratic mirror map)")
    size = preconditioner.shape[0]

    def update(updates: Updates, state: EmptyState, *, ctx: RoundContext) -> StepResult:
        if len(updates) == 1:
            ((name, value),) = updates.items()
            if value.shape[-1] != size:
                raise ValueError(f"the preconditioner is {size} × {size}, the update's last dimension {value.shape[-1]}")
            return StepResult({name: value @ preconditioner}, state, {})
        flat = torch.cat([v.reshape(-1) for v in updates.values()])
        if flat.numel() != size:
            raise ValueError(f"the preconditioner is {size} × {size}, the update has {flat.numel()} parameters")
        mapped = (preconditioner @ flat).split([v.numel() for v in updates.values()])
        return StepResult({k: m.view_as(v) for (k, v), m in zip(updates.items(), mapped)}, state, {})

    return after_sum_step(update)
