"""Adaptive clipping to a target quantile of the update norms (Andrew, Thakkar, McMahan, Ramaswamy
2021, "Differentially private learning with adaptive clipping").

Each round clips to C_t, releases the noisy count of users whose update norm was at most C_t
(sensitivity 1 under add/remove, Gaussian noise of std σ_b: ``GaussianDpEvent(σ_b)``) and moves
the norm geometrically: C_{t+1} = C_t · exp(−η (b̃_t − γ)), with b̃_t the noisy unclipped fraction
(count ÷ the expected cohort m). The round's noise uses C_t (the ``clip_norm`` output), not C_{t+1}. Per user
the step clips to C_t and tallies the bit ‖Δ_k‖ ≤ C_t beside the update; after the sum it noises the summed
bits and moves C.
With ``secure_sampler`` the count's noise is added by OpenDP (:mod:`fedpub.privacy.secure_noise`), like the
mean's in :mod:`fedpub.steps.gaussian_noise`.
"""

from __future__ import annotations

import math
from typing import TypedDict

import dp_accounting
import torch

from collections.abc import Mapping
from typing import Any

from fedpub.cohort_updates import Cohort
from fedpub.privacy.secure_noise import add_secure_gaussian, require_secure_sampler
from fedpub.seeding import torch_generator
from fedpub.step import Finished, Mapped, Prepared, Releases, Step, UserSum, user_step
from fedpub.steps.clip import clip_factors, norm_diagnostics
from fedpub.types import Params, RoundContext


class AdaptiveClipState(TypedDict):
    """C_t, and the state of the count noise's generator."""

    clip_norm: float
    rng: torch.Tensor


def adaptive_clip(
    initial_clip_norm: float,
    target_quantile: float,
    learning_rate: float,
    count_noise_std: float,
    seed: int,
    *,
    secure_sampler: bool = False,
) -> Step:
    """Clip to C_t and adapt C towards the ``target_quantile`` γ of the update norms (the count noised by OpenDP
    with ``secure_sampler``)."""
    if not (initial_clip_norm > 0 and math.isfinite(initial_clip_norm)):
        raise ValueError(f"initial_clip_norm must be a finite number > 0, got {initial_clip_norm}")
    if not 0 <= target_quantile <= 1 or not learning_rate > 0 or not count_noise_std >= 0:
        raise ValueError(
            "adaptive clipping needs 0 <= target_quantile <= 1, learning_rate > 0, count_noise_std >= 0; got "
            f"{target_quantile}, {learning_rate}, {count_noise_std}"
        )
    if secure_sampler:
        require_secure_sampler()

    def init(params: Params) -> AdaptiveClipState:
        rng = torch_generator(seed, "adaptive_clip").get_state()
        return AdaptiveClipState(clip_norm=float(initial_clip_norm), rng=rng)

    def prepare(like: Params, state: AdaptiveClipState, *, ctx: RoundContext) -> Prepared:
        c = state["clip_norm"]
        return Prepared(state, {"clip_norm": c}, {"clip_norm": c}, {"clip_norm": c})

    def apply(updates: Cohort, values: Mapping[str, Any]) -> Mapped:
        c = values["clip_norm"]
        norms = updates.norms()
        unclipped = (norms <= c).double()
        return Mapped(updates.scale(clip_factors(norms, c)), {"unclipped": unclipped}, norm_diagnostics(norms, c))

    def finish(total: UserSum, state: AdaptiveClipState, *, ctx: RoundContext, values: Mapping[str, Any]) -> Finished:
        c = state["clip_norm"]
        gen = torch.Generator()
        gen.set_state(state["rng"])
        count = total.tallies["unclipped"]
        if secure_sampler:
            noisy_count = float(add_secure_gaussian(torch.tensor([count], dtype=torch.float64), count_noise_std))
        else:
            noisy_count = count + float(torch.normal(0.0, 1.0, size=(), generator=gen)) * count_noise_std
        unclipped_fraction = noisy_count / ctx.expected_cohort
        next_c = c * math.exp(-learning_rate * (unclipped_fraction - target_quantile))
        metrics = {"next_clip_norm": next_c, "noisy_unclipped_fraction": unclipped_fraction}
        return Finished(AdaptiveClipState(clip_norm=next_c, rng=gen.get_state()), metrics,
                        (dp_accounting.GaussianDpEvent(count_noise_std),))

    def releases(round_index: int) -> Releases:
        return Releases((dp_accounting.GaussianDpEvent(count_noise_std),))

    return user_step(prepare, apply=apply, finish=finish, init=init, outputs=("clip_norm",), releases=releases)
