"""The Gaussian mechanism on the aggregated update (user-level DP-FedAvg, McMahan et al. 2018).

The sum of C-clipped updates has L2 sensitivity C under adding or removing one user; this step
adds N(0, (z·C)²) to that sum, which on the mean Σ/m is noise of std z·C/m. It reads C from the
``clip_norm`` input (the clip step's output), z from the optional ``noise_multiplier`` input (a schedule
step's output) or else the factory's value, and emits ``GaussianDpEvent(z)``. Its randomness
comes from a torch generator whose state is the step's state, so a seed reproduces the noise on
any backend and a checkpoint resumes it exactly.
"""

from __future__ import annotations

import math
from typing import Any

import dp_accounting
import torch

from fedpub.seeding import torch_generator
from fedpub.step import Step
from fedpub.types import Params, RoundContext, StepResult, Updates


def _check_noise_multiplier(z: float) -> None:
    if not (z >= 0 and math.isfinite(z)):
        raise ValueError(f"noise_multiplier must be a finite number >= 0, got {z}")


def gaussian_noise(noise_multiplier: float, seed: int) -> Step:
    """Add noise of std z·C / m to the mean update (z·C on the sum); z is the ``noise_multiplier`` input
    when a step supplies one this round, else the factory's ``noise_multiplier``."""
    _check_noise_multiplier(noise_multiplier)
    default_noise_multiplier = noise_multiplier

    def init(params: Params) -> dict[str, torch.Tensor]:
        return {"rng": torch_generator(seed, "gaussian_noise").get_state()}

    def update(
        updates: Updates,
        state: dict[str, torch.Tensor],
        *,
        ctx: RoundContext,
        clip_norm: float,
        noise_multiplier: float | None = None,
        **_: Any,
    ) -> StepResult:
        z = default_noise_multiplier if noise_multiplier is None else noise_multiplier
        _check_noise_multiplier(z)
        if z > 0 and math.isinf(clip_norm):
            raise ValueError("noise needs a finite clip_norm: the sensitivity is unbounded")
        std_on_sum = z * clip_norm if z > 0 else 0.0
        std_on_mean = std_on_sum / ctx.expected_cohort
        gen = torch.Generator()
        gen.set_state(state["rng"])
        noisy = {}
        for name, value in updates.items():
            # normal_(generator=gen) draws exactly what torch.normal with generator=gen draws, in half the time
            noise = torch.empty(value.shape, dtype=value.dtype).normal_(generator=gen)
            noisy[name] = noise.to(value.device).mul_(std_on_mean).add_(value)
        metrics = {"noise_multiplier": z, "noise_std": std_on_mean}
        event = dp_accounting.GaussianDpEvent(z)
        return StepResult(noisy, {"rng": gen.get_state()}, metrics, (event,))

    return Step(init, update)
