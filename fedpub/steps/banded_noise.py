"""Banded matrix-factorization noise on the mean update: amplified banded MF DP-FTRL (Choquette-Choo, McMahan, Rush
and Thakurta, "(Amplified) Banded Matrix Factorization: A unified approach to private training", NeurIPS 2023;
the factorizations are :mod:`fedpub.privacy.banded_factorization`'s).

The server releases the rounds' mean updates x_t plus correlated noise: round t adds s_t·w_t with s_t = z·C_t/m
(the Gaussian's std on the mean) and W = C⁻¹Z, Z i.i.d. standard normal, C the b-banded lower-triangular Toeplitz
factor of coefficients c_0, ..., c_(b−1) with column norms at most 1. W is computed by the recursion

    w_t = (z_t − Σ_(j=1..min(b−1, t)) c_j·w_(t−j)) / c_0,

so the state holds the last b − 1 noise vectors (memory b·d with the round's own) besides the generator. The
released prefix sums then carry the noise A·W = B·Z, correlated so that it partly cancels. Privacy: the rounds are
x_t = s_t·(y_t + w_t) with y_t = x_t/s_t, post-processing of C·Y + Z; a user whose participations are at least b
rounds apart (:class:`~fedpub.privacy.events.CyclicPoissonSampling` with k ≥ b groups) touches one column of C per
participation, on disjoint rows, each of norm at most sens/z (sens = C's largest column norm): every participation
is a Gaussian of noise multiplier z/sens on the round's cohort. The step declares ``GaussianDpEvent(z / sens)``
every round and the cohort rule amplifies it. Because s_t scales the standard noise of its own round only, C_t may
change round to round (adaptive clipping) and so may z (a schedule), the recursion staying on the standard draws.

b = 1 is c = (1): w_t = z_t, DP-FedAvg's independent noise, drawn from the same generator stream
(``gaussian_noise``) in the same order as :func:`~fedpub.steps.gaussian_noise.gaussian_noise`, so the same seed
gives the same model bit for bit. The generator's state and the noise vectors are the step's state: a checkpoint
resumes the correlation exactly.
"""

from __future__ import annotations

import math
from typing import TypedDict

import dp_accounting
import torch

from fedpub import tree
from fedpub.noise_prefetch import prefetch_normals, standard_normals
from fedpub.privacy.banded_factorization import BandedFactorization
from fedpub.seeding import torch_generator
from fedpub.step import Releases, Step, StepResult, after_sum_step
from fedpub.steps.gaussian_noise import check_noise_multiplier, standard_normal
from fedpub.types import Params, RoundContext, Updates


class BandedNoiseState(TypedDict):
    """The noise's generator and the last (at most b − 1) standard noise vectors w, oldest first."""

    rng: torch.Tensor
    history: list[Updates]


def banded_noise(factorization: BandedFactorization, noise_multiplier: float, seed: int) -> Step:
    """Add (C⁻¹Z)_t·z·C_t/m to the mean update, C the ``factorization``'s banded factor; z is the
    ``noise_multiplier`` input when a step supplies one this round, else the factory's."""
    check_noise_multiplier(noise_multiplier)
    coefficients = factorization.coefficients
    sensitivity = factorization.sensitivity()
    keep = factorization.bands - 1

    def multiplier(scheduled: float | None) -> float:
        z = noise_multiplier if scheduled is None else scheduled
        check_noise_multiplier(z)
        return z

    def init(params: Params) -> BandedNoiseState:
        return BandedNoiseState(rng=torch_generator(seed, "gaussian_noise").get_state(), history=[])

    def update(
        updates: Updates,
        state: BandedNoiseState,
        *,
        ctx: RoundContext,
        clip_norm: float,
        noise_multiplier: float | None = None,
    ) -> StepResult:
        z = multiplier(noise_multiplier)
        if z > 0 and math.isinf(clip_norm):
            raise ValueError("noise needs a finite clip_norm: the sensitivity is unbounded")
        std_on_mean = (z * clip_norm if z > 0 else 0.0) / ctx.expected_cohort
        gen = torch.Generator()
        gen.set_state(state["rng"])
        if all(value.device.type == "cpu" for value in updates.values()):
            specs = [(value.shape, value.dtype) for value in updates.values()]
            draws = dict(zip(updates, standard_normals(specs, gen), strict=True))
            prefetch_normals(specs, gen.get_state())  # the next round's, while its cohort trains
        else:
            draws = {name: standard_normal(v.shape, v.dtype, v.device, gen) for name, v in updates.items()}
        history = state["history"]
        for j, past in enumerate(reversed(history), start=1):  # w_(t−1), w_(t−2), ...
            draws = tree.sub(draws, tree.scale(past, coefficients[j]))
        noise = draws if coefficients[0] == 1.0 else tree.scale(draws, 1.0 / coefficients[0])
        noisy = {name: torch.add(value, noise[name], alpha=std_on_mean) for name, value in updates.items()}
        metrics = {"noise_multiplier": z, "noise_std": std_on_mean, "bands": float(factorization.bands)}
        new_state = BandedNoiseState(rng=gen.get_state(), history=[*history, noise][-keep:] if keep else [])
        return StepResult(noisy, new_state, metrics, (dp_accounting.GaussianDpEvent(z / sensitivity),))

    def releases(round_index: int, *, noise_multiplier: float | None = None) -> Releases:
        return Releases((dp_accounting.GaussianDpEvent(multiplier(noise_multiplier) / sensitivity),))

    return after_sum_step(update, init=init, inputs=("clip_norm",), optional_inputs=("noise_multiplier",),
                          releases=releases)
