"""DOPE-SGD in federated form (Nasr et al. 2023, "Effectively using public data in privacy
preserving machine learning", Alg. 2, eq. 2 and Table 7): each round a few public users train
too, and the private updates are clipped around their mean update c_t (clipped to λ):
Δ̄ = c_t + (Σ_k clip(Δ_k − c_t, C) + N(0, z²C²)) / m. The center is added outside the noisy sum, so
the mechanism, its sensitivity C and its accounting are DP-FedAvg's; with c_t = 0 it is DP-FedAvg.
"Extended" mode also averages the public updates in, outside the noisy sum. ``recenter.clip_around_center:
false`` clips around zero and still adds c_t: the control that removes the recentering alone.
"""

from __future__ import annotations

from fedpub.step import Step
from fedpub.steps.recenter import add_center, recenter
from fedpub.strategies.build_context import BuildContext


def recenter_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """Before the clip: subtract the center, clipped to ``recenter.center_clip``, by default the clip norm C: c_t is
    added to the model outside the noisy sum, so an unclipped one lets a diverged public user move the model
    without bound."""
    config = ctx.config.recenter
    center_clip = ctx.config.clip_norm if config.center_clip is None else config.center_clip
    return [("recenter", recenter(center_clip, subtract=config.clip_around_center))]


def add_center_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """After the noise: add the center back (and, extended, the public updates' share of the average)."""
    return [("add_center", add_center(ctx.config.recenter.extended))]
