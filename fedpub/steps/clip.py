"""Per-user L2 clipping with a fixed norm: the sensitivity bound of user-level DP-FedAvg.

Each row of the cohort's updates is scaled by min(1, C / ||Δ_k||) (McMahan et al. 2018,
"Learning differentially private recurrent language models"): a per-user step whose map reads only C
(:func:`clip_rows`, shared by the steps that clip to a C of their own). C lives in the state, so an
adaptive-clipping step can replace it; the step hands C to later steps as the output ``clip_norm``.
"""

from __future__ import annotations

import math
from typing import TypedDict

import torch

from collections.abc import Mapping
from typing import Any

from fedpub.cohort_updates import Cohort
from fedpub.step import Mapped, Prepared, Step, user_step
from fedpub.types import Params, RoundContext


class ClipState(TypedDict):
    """C, the clip norm."""

    clip_norm: float


def clip_factors(norms: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """min(1, C / norm) per row; rows with norm 0 are left as they are."""
    if math.isinf(clip_norm):
        return torch.ones_like(norms)
    return torch.clamp(clip_norm / norms.clamp_min(torch.finfo(norms.dtype).tiny), max=1.0)


def norm_diagnostics(norms: torch.Tensor, clip_norm: float) -> dict[str, float]:
    """The exact clipped fraction and the norms' mean, median and max: un-noised statistics of private users,
    diagnostics outside the DP guarantee."""
    if not norms.numel():
        return {"clipped_fraction": 0.0}
    return {
        "clipped_fraction": float((norms > clip_norm).double().mean()),
        "norm_mean": float(norms.mean()),
        "norm_median": float(norms.median()),
        "norm_max": float(norms.max()),
    }


def clip_rows(updates: Cohort, values: Mapping[str, Any]) -> Mapped:
    """Every row clipped to the ``clip_norm`` of ``values``, with the norms' diagnostics."""
    c = values["clip_norm"]
    norms = updates.norms()
    return Mapped(updates.scale(clip_factors(norms, c)), diagnostics=norm_diagnostics(norms, c))


def clip(clip_norm: float) -> Step:
    """Clip every client's update to L2 norm ``clip_norm`` (``math.inf`` disables clipping)."""
    if not clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0 (or inf), got {clip_norm}")

    def init(params: Params) -> ClipState:
        return ClipState(clip_norm=float(clip_norm))

    def prepare(like: Params, state: ClipState, *, ctx: RoundContext) -> Prepared:
        c = state["clip_norm"]
        return Prepared(ClipState(clip_norm=c), {"clip_norm": c}, {"clip_norm": c}, {"clip_norm": c})

    return user_step(prepare, apply=clip_rows, init=init, outputs=("clip_norm",))
