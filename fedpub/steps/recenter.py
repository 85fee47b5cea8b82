"""Public-user recentering of the clipping (DOPE-SGD: Nasr et al. 2023, "Effectively using public
data in privacy preserving machine learning", Alg. 2 and eq. 2).

``recenter`` subtracts the center c_t (the public users' mean update, itself clipped to λ) from
every private update before clipping; ``add_center`` adds c_t back to the noisy mean, *outside*
the noisy sum: Δ̄ = c_t + (Σ_k clip(Δ_k − c_t, C) + N(0, z²C²)) / m. Adding or removing one private
user then moves the noisy sum by at most C whatever c_t is, and c_t (public) costs no privacy.
With no public update this round, c_t = 0 and the round is DP-FedAvg. ``recenter`` is a per-user step whose
map reads only c_t (what a device would be sent); ``add_center`` runs after the sum.

``recenter(subtract=False)`` is the mechanism control that removes the recentering alone: the updates are clipped
around zero, c_t is still added back at DOPE's own weight, Δ̄ = c_t + (Σ_k clip(Δ_k, C) + N(0, z²C²)) / m (not the
paper's only-private arm, which averages the public mean in at weight k / (m + k)).
"""

from __future__ import annotations

import math

from collections.abc import Mapping
from typing import Any

from fedpub import tree
from fedpub.cohort_updates import Cohort
from fedpub.step import EmptyState, Mapped, Prepared, Step, StepResult, after_sum_step, user_step
from fedpub.steps.clip import clip_factors
from fedpub.types import Params, RoundContext, Updates


def recenter(center_clip: float = math.inf, subtract: bool = True) -> Step:
    """Subtract c_t = clip(public mean update, λ = ``center_clip``) from every private update (``subtract``
    False: leave the updates as they are and only hand c_t on to ``add_center``)."""
    if not center_clip > 0:
        raise ValueError(f"center_clip must be > 0 (or inf), got {center_clip}")

    def prepare(
        like: Params,
        state: EmptyState,
        *,
        ctx: RoundContext,
        public_mean: Updates | None = None,
    ) -> Prepared:
        if public_mean is None:
            center = tree.zeros_like(like)
        else:
            factor = clip_factors(tree.global_norm(public_mean).reshape(1), center_clip)
            center = tree.scale(public_mean, float(factor))
        metrics = {"center_norm": float(tree.global_norm(center))}
        return Prepared(state, {"center": center}, {"center": center}, metrics)

    def apply(updates: Cohort, values: Mapping[str, Any]) -> Mapped:
        center = values["center"]
        return Mapped(updates.map(lambda row: tree.sub(row, center)) if subtract else updates)

    return user_step(prepare, apply=apply, optional_inputs=("public_mean",), outputs=("center",))


def add_center(extended: bool = False) -> Step:
    """Add the center back to the (noisy) mean, outside the noisy sum. ``extended`` (DOPE's extended
    mode) then averages in the k public users' mean update: (m·Δ̄ + k·Δ̄_pub) / (m + k)."""

    def update(
        updates: Updates,
        state: EmptyState,
        *,
        ctx: RoundContext,
        center: Updates,
        public_mean: Updates | None = None,
    ) -> StepResult:
        mean = tree.add(updates, center)
        if extended and public_mean is not None and ctx.num_public:
            m, k = ctx.expected_cohort, ctx.num_public
            mean = tree.add(tree.scale(mean, m / (m + k)), tree.scale(public_mean, k / (m + k)))
        return StepResult(mean, state)

    return after_sum_step(update, inputs=("center",), optional_inputs=("public_mean",))
