"""The Gaussian mechanism on the aggregated update (user-level DP-FedAvg, McMahan et al. 2018).

The sum of C-clipped updates has L2 sensitivity C under adding or removing one user; this step
adds N(0, (z·C)²) to that sum, which on the mean Σ/m is noise of std z·C/m. It reads C from the
``clip_norm`` input (the clip step's output), z from the optional ``noise_multiplier`` input (a schedule
step's output) or else the factory's value, and emits ``GaussianDpEvent(z)`` (declared the same way, from the
declared ``noise_multiplier`` or the factory's value). Its randomness
comes from a torch generator whose state is the step's state, so a seed reproduces the noise on
any backend and a checkpoint resumes it exactly. Noise for a model on a GPU is drawn there, from a generator of
that device seeded by the step's generator (:func:`standard_normal`), not on the host and copied over. Noise for
a model on the CPU is drawn a round ahead, in a background thread while the cohort trains
(:mod:`fedpub.noise_prefetch`): the same draws from the same stream, off the round's critical path.

With ``secure_sampler`` the noise is added by OpenDP's Gaussian mechanism instead
(:func:`fedpub.privacy.secure_noise.add_secure_gaussian`: exact discrete sampling from the OS's randomness, not
the textbook floating-point sampler): same std, same event, but not seeded, so not reproducible; the generator's
state is carried unchanged.
"""

from __future__ import annotations

import math
from typing import TypedDict

import dp_accounting
import torch

from fedpub.noise_prefetch import draw_normals, prefetch_normals, standard_normals
from fedpub.privacy.secure_noise import add_secure_gaussian, require_secure_sampler
from fedpub.seeding import torch_generator
from fedpub.step import Releases, Step, StepResult, after_sum_step
from fedpub.types import Params, RoundContext, Updates


class NoiseState(TypedDict):
    """The state of the noise's generator."""

    rng: torch.Tensor


def check_noise_multiplier(z: float) -> None:
    """Refuse a noise multiplier that is negative, NaN or infinite (every noise step's input)."""
    if not (z >= 0 and math.isfinite(z)):
        raise ValueError(f"noise_multiplier must be a finite number >= 0, got {z}")


def standard_normal(
    shape: torch.Size, dtype: torch.dtype, device: torch.device, generator: torch.Generator
) -> torch.Tensor:
    """N(0, 1) draws of ``shape`` made on ``device``: on the CPU from ``generator`` (a CPU generator) itself; on
    another device from a generator of that device seeded by one 63-bit draw of ``generator`` (a device
    generator's state is not a CPU generator's), so the same seed gives the same noise on the same kind of
    device."""
    if device.type == "cpu":
        return draw_normals([(shape, dtype)], generator)[0]
    seed = int(torch.randint(2**63 - 1, (1,), generator=generator))
    on_device = torch.Generator(device=device).manual_seed(seed)
    return torch.empty(shape, dtype=dtype, device=device).normal_(generator=on_device)


def gaussian_noise(
    noise_multiplier: float, seed: int, *, secure_sampler: bool = False, prefetch: bool = True
) -> Step:
    """Add noise of std z·C / m to the mean update (z·C on the sum); z is the ``noise_multiplier`` input
    when a step supplies one this round, else the factory's ``noise_multiplier``. ``secure_sampler``: draw it
    with OpenDP from the OS's randomness (needs the ``secure-noise`` extra, checked here). ``prefetch`` (a model
    on the CPU): once a round's noise is drawn, the next round's standard normals are drawn in the background
    (:mod:`fedpub.noise_prefetch`; the same draws, only earlier)."""
    check_noise_multiplier(noise_multiplier)
    if secure_sampler:
        require_secure_sampler()
    default_noise_multiplier = noise_multiplier

    def init(params: Params) -> NoiseState:
        return NoiseState(rng=torch_generator(seed, "gaussian_noise").get_state())

    def update(
        updates: Updates,
        state: NoiseState,
        *,
        ctx: RoundContext,
        clip_norm: float,
        noise_multiplier: float | None = None,
    ) -> StepResult:
        z = default_noise_multiplier if noise_multiplier is None else noise_multiplier
        check_noise_multiplier(z)
        if z > 0 and math.isinf(clip_norm):
            raise ValueError("noise needs a finite clip_norm: the sensitivity is unbounded")
        std_on_sum = z * clip_norm if z > 0 else 0.0
        std_on_mean = std_on_sum / ctx.expected_cohort
        gen = torch.Generator()
        gen.set_state(state["rng"])
        if secure_sampler:
            noisy = {name: add_secure_gaussian(value, std_on_mean) for name, value in updates.items()}
        elif all(value.device.type == "cpu" for value in updates.values()):
            specs = [(value.shape, value.dtype) for value in updates.values()]
            normals = standard_normals(specs, gen)
            # value + std·n written over the draws in one pass (the draws are this step's own tensors)
            noisy = {
                name: torch.add(value, n, alpha=std_on_mean, out=n)
                for (name, value), n in zip(updates.items(), normals, strict=True)
            }
            if prefetch:
                prefetch_normals(specs, gen.get_state())  # the next round's, while its cohort trains
        else:
            noisy = {
                name: standard_normal(value.shape, value.dtype, value.device, gen).mul_(std_on_mean).add_(value)
                for name, value in updates.items()
            }
        metrics = {"noise_multiplier": z, "noise_std": std_on_mean}
        event = dp_accounting.GaussianDpEvent(z)
        return StepResult(noisy, NoiseState(rng=gen.get_state()), metrics, (event,))

    def releases(round_index: int, *, noise_multiplier: float | None = None) -> Releases:
        z = default_noise_multiplier if noise_multiplier is None else noise_multiplier
        return Releases((dp_accounting.GaussianDpEvent(z),))

    return after_sum_step(update, init=init, inputs=("clip_norm",), optional_inputs=("noise_multiplier",),
                          releases=releases)
