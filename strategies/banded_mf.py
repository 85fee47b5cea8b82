"""Amplified banded matrix-factorization DP-FTRL in federated form (Choquette-Choo, McMahan, Rush and Thakurta,
"(Amplified) Banded Matrix Factorization: A unified approach to private training", NeurIPS 2023; the banded square
root of Kalinin and Lampert, "Banded Square Root Matrix Factorization for Differentially Private Model Training",
NeurIPS 2024): the private mean of DP-FedAvg (clip to C, sum, ÷ m) with correlated noise in the ``noise`` slot
(:mod:`fedpub.steps.banded_noise`), the cohorts drawn by cyclic Poisson sampling over k ≥ b groups
(``sampling.kind: cyclic_poisson``; ``cyclic_fixed``, its fixed-size form, for SecAgg+), so that each user takes part
at most once every b rounds and each participation is a sampled Gaussian of noise multiplier z/sens (sens = 1: the
factorizations are normalised).
The factorization is over the run's T rounds for the workload of the server's optimizer: the prefix sums, with SGD's
momentum β when it has one (DP-FTRLM's workload; Adam is post-processing of the same releases, factored for plain
prefix sums). The round is cut at the sum, so the recentering, the preconditioning, the mirror mix, the warm start
and every transport compose with it unchanged.
"""

from __future__ import annotations

from fedpub.privacy.banded_factorization import banded_square_root, optimized_banded
from fedpub.privacy.events import CyclicFixedSizeSampling, CyclicPoissonSampling
from fedpub.step import Step
from fedpub.steps.banded_noise import banded_noise
from fedpub.strategies.build_context import BuildContext


def banded_noise_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """The noise slot of the private mean: banded MF noise of ``strategy.noise``'s bands and factorization. Refuses
    OpenDP's sampler (the release adds stored noise to the mean in floating point, as the tree does), bands > 1
    without cyclic sampling over at least as many groups, and more bands than rounds."""
    noise, config = ctx.config.noise, ctx.config
    if ctx.secure_sampler:
        raise ValueError("privacy.noise_sampler `opendp` does not cover strategy.noise (banded_mf): its release adds "
                         "stored correlated noise to the mean in floating point; use privacy.noise_sampler: torch")
    sampling = ctx.sampling
    cyclic = isinstance(sampling, (CyclicPoissonSampling, CyclicFixedSizeSampling))
    if noise.bands > 1 and not (cyclic and sampling.groups >= noise.bands):
        raise ValueError(f"strategy.noise.bands {noise.bands} needs each user at most once every {noise.bands} "
                         f"rounds: set strategy.sampling.kind: cyclic_poisson (cyclic_fixed for fixed-size cohorts) "
                         f"with groups >= {noise.bands} (got {sampling!r}), or bands: 1")
    if noise.bands > ctx.rounds:
        raise ValueError(f"strategy.noise.bands {noise.bands} exceeds the run's {ctx.rounds} rounds: set bands <= "
                         f"rounds")
    optimizer = config.server_optimizer
    momentum = optimizer.momentum if optimizer.name == "sgd" else 0.0
    factor = banded_square_root if noise.factorization == "bsr" else optimized_banded
    factorization = factor(ctx.rounds, noise.bands, momentum)
    return [("noise", banded_noise(factorization, ctx.noise_multiplier, ctx.seed))]
