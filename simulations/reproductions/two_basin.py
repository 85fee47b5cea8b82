"""Seed 001 (Ganesh et al. 2023, "Why is public pretraining necessary for private model training?") on its own
two-basin construction (eq. 1–2, the toy of Figure 2): Table 2 (more budget in the first or the last epoch) and
Figure 4 (public epochs spent before or after private training), with a strongly convex control where the
paper's prediction flips.

**The landscape** (eq. 1–2 with a one-dimensional θ₁, the paper's Figure 2): θ = (θ₁ ∈ ℝ, θ₂ ∈ ℝ^m), one example
d = (d₁, d₂), ℓ(θ; d) = ℓ₁(θ₁; d₁) + P·q(θ₁)·ℓ₂(θ₂; d₂) with ℓ₁ = min(½(θ₁ − d₁)², 9/2),
ℓ₂ = min(0, ‖θ₂ − d₂‖²/(2r²) − ½), and q the gate of eq. 1 around S = {|θ₁| ∈ [M − R₁, M + R₁]} (eq. 2: in one
dimension the shell is two basins, at −M and +M): q = 1 in S, falls linearly to 0 within R₂ of S, 0 beyond (so
q(0) = 0: at the origin only θ₁ has a gradient). The figure's M = 0.5, R₁ = 0.1, R₂ = 0.2; r = 0.1 (the figure's
0.01 would make θ₂'s curvature 10⁴). d₁ ~ N(M, s₁²), d₂ = μ₂ + s₂·ξ projected into B(0, r), ‖μ₂‖ = r/2: the
population minimum is in the basin at +M; the basin at −M is a local minimum (once θ₁ is in it, ℓ₂ < 0 holds θ₁
at its inner edge), so **which basin the first steps choose is final**. The **strongly convex control** drops the
gate and the floors: ℓ = ½(θ₁ − d₁)² + P·‖θ₂ − d₂‖²/(2r²), where what is chosen early is forgotten and the last
steps' noise is what stays. Its Figure-4 arms post-train for the same T_pub − t public steps as the two-basin arms,
which on a convex loss bring the model to the public optimum (θ₂ in one step at lr r²/P, θ₁ to within 13 % of its
gap in 200 steps, 2 % in 400): the all-post-training arm ends near public-only's model whatever private training
did (fedpub issue 45 asked for a "limited" post-training). The paper's budget is not limited in
that sense: its pretraining "converges to a good basin" after about half of T_pub (§3, Figure 4: little gain after
t = 100 of 200), so its post-training of T_pub − t ≥ T_pub/2 epochs would converge too on a convex loss; a shorter
one would be a length the paper does not give, and that length alone would decide the convex comparison.

**Training.** DP-SGD on the private examples (one example = one user): Poisson batches of rate q, per-example
clipping to C, noise N(0, z_t²C²I) on the sum, division by the expected batch; z calibrated by fedpub's accountant
(:func:`fedpub.privacy.calibration.calibrate`, PLD; the quick mode RDP) so that the whole planned run is (ε, δ)-DP.
Public training is full-batch gradient descent on the public examples at a fixed rate (not private, not tuned).

**Arms** (every private arm tuned on what scales its noise, the learning rate and the clip norm, on one union grid
on :data:`TUNING_DRAWS` tuning draws disjoint from the test seeds: an edge extended for one arm is extended for all,
by :func:`fedpub.simulations.reproductions.tuning.tune_jointly`, so every arm has the same grid and budget):

- Table 2, from θ = 0 on private data only: ``even`` (one z), ``early`` (the first epoch's noise variance 0.6
  times the others', all calibrated together to ε, as :mod:`budget_schedule_table2`), ``late`` (the last epoch);
- Figure 4, T_pub public steps split: ``pre_<t>`` takes t public steps from θ = 0, then DP-SGD (one z), then the
  remaining T_pub − t public steps; ``public_only`` takes the T_pub steps and no private one; ``origin`` is θ = 0
  (the trivial predictor, for the gate).

**Best and shared points** (fedpub issue 45). Each claim is judged twice: at each arm's own tuned (lr, C), and with
both arms at one shared point, the control's (the claim's worse arm: ``<better>@<worse>`` runs the better arm at
the worse arm's (lr, C)), where the difference is the schedule's or the split's alone, not the distance between two
tuned points. A cell where an arm's tuned learning rate sits at
its grid's low edge (private training tuned down to nothing) is not testable (the judge's
:class:`~fedpub.simulations.reproductions.judge.PrivateStepOn`).

**Regime gate.** The Table 2 and Figure 4 claims are about fixing a basin choice that cold private training gets
wrong; where it (the tuned ``even`` arm) misses the basin at +M in under :data:`MISS_FLOOR` of its chains, they are
**not testable** there, with the share (the judge's :class:`~fedpub.simulations.reproductions.judge.AtLeast` on the
measure :data:`MISSED`). The full mode's 20 private examples a draw put ε = 1 in that regime (at 50, cold training
found the right basin in 97–100 % of chains).

**Seeds and pairing.** A seed is one draw of the data and one stream of batches and noise shared by every arm (common
random numbers: the same standard normals scaled by each arm's z_t·C); its figure is the mean test excess loss
(loss − loss at (M, μ₂) on a test sample) over ``replicates`` independent chains of that stream. ``paired.json``
holds every arm's per-seed figures and the claims (:mod:`fedpub.simulations.reproductions.paired`).

**Regimes** (:data:`REGIMES`). ``figure2`` (the default) is the figure's one-dimensional toy. ``high_dim`` is the
regime of Theorem 2.1 (fedpub issue 45, item 5): θ₁ in 2,000 dimensions, where the two basins become the shell
‖θ₁‖ ∈ [M − R₁, M + R₁] and the basin at +M the shell's points within R₁ + R₂ of θ₁* = M·e₁, with 5 public and
100 private examples: private mean estimation of θ₁ is hard at the noise ε asks for, 5 public examples find the
shell, and 100 private examples estimate θ₂ better than 5 public ones. It adds nothing but sizes; its record is
``two_basin_high_dim``.

    python -m fedpub.simulations.reproductions.two_basin [--regime figure2|high_dim] [--seeds 20] [--epsilons 1,3,8]
        [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import torch
from dp_accounting import dp_event

from fedpub.atomic import write_text_atomic
from fedpub.privacy.calibration import calibrate
from fedpub.privacy.events import PoissonSampling, neighboring_relation, run_event
from fedpub.seeding import torch_generator
from fedpub.simulations.reproductions.judge import RULE, AtLeast, Beats, PrivateStepOn
from fedpub.simulations.reproductions.paired import PairedClaim, judgement, paired_line, write_paired_json
from fedpub.simulations.reproductions.results_record import (
    ClaimRecord,
    ReproductionRecord,
    default_out,
    write_claims_json,
)
from fedpub.simulations.reproductions.tuning import Axis, Tuning, at_point, low_edges, split_point, tune_jointly

NAME = "two_basin"
DTYPE = torch.float64
Kind = Literal["two_basin", "convex"]
KINDS: tuple[Kind, ...] = ("two_basin", "convex")
MISSED = "missed_basin"
"""The regime measure: the share of a seed's chains in which cold private training (the ``even`` arm) ends outside
the basin at +M."""
MISS_FLOOR = 0.1
"""The regime gate of the two-basin claims: they are testable only where cold private training misses the right
basin in at least this share of chains (where it never misses, an early budget or public pretraining has no basin
choice to fix)."""
BOOST_NOISE_RATIO = math.sqrt(0.6)
"""The boosted epoch's z over the others' (Table 2's σ² = 0.6 read as a variance ratio, as in
:mod:`fedpub.simulations.reproductions.budget_schedule_table2`)."""


@dataclass(frozen=True)
class Landscape:
    """The loss of eq. 1–2 (``two_basin``) or its strongly convex control (``convex``)."""

    kind: Kind
    center: float = 0.5  # M
    basin_halfwidth: float = 0.1  # R₁
    gate_width: float = 0.2  # R₂
    radius: float = 0.1  # r
    scale: float = 1.0  # P

    def gate(self, theta1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q(θ₁) of eq. 1 on the shell ‖θ₁‖ ∈ [M − R₁, M + R₁] and k with ∇q = k·θ₁, both (..., 1) for θ₁ (..., D)
        (in one dimension the shell is the two basins at ±M)."""
        size = theta1.norm(dim=-1, keepdim=True)
        outer, inner = size - (self.center + self.basin_halfwidth), (self.center - self.basin_halfwidth) - size
        distance = torch.clamp(torch.maximum(outer, inner), min=0.0)
        q = torch.clamp(1 - distance / self.gate_width, min=0.0)
        sloped = (distance > 0) & (distance < self.gate_width)
        slope = torch.where(outer > 0, -1 / self.gate_width, 1 / self.gate_width) / size.clamp_min(1e-300)
        return q, torch.where(sloped, slope, torch.zeros_like(slope))

    def in_basin(self, theta: torch.Tensor, optimum: torch.Tensor, dim1: int) -> torch.Tensor:
        """Whether θ₁ ended in the basin of the population minimum θ₁*: within R₁ + R₂ of it, where the gate is
        open around it (in one dimension: θ₁ > 0 with q > 0; in D, a chain whose θ₁ entered the shell far from θ₁*
        missed it: its excess ℓ₁ stays)."""
        distance = (theta[..., :dim1] - optimum[:dim1]).norm(dim=-1)
        return distance < self.basin_halfwidth + self.gate_width

    def losses(self, theta: torch.Tensor, d1: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        """ℓ(θ; d) for every model (leading dims of ``theta``, last dim D + m) and example (d₁ (n, D), d₂ (n, m)):
        (..., n)."""
        dim1 = d1.shape[-1]
        half1 = 0.5 * _squared_distances(theta[..., :dim1], d1)
        quad2 = _squared_distances(theta[..., dim1:], d2) / (2 * self.radius**2)
        if self.kind == "convex":
            return half1 + self.scale * quad2
        q, _ = self.gate(theta[..., :dim1])
        return torch.clamp(half1, max=4.5) + self.scale * q * torch.clamp(quad2 - 0.5, max=0.0)

    def gradient_sum(self, theta: torch.Tensor, d1: torch.Tensor, d2: torch.Tensor, clips: torch.Tensor | None = None,
                     weights: torch.Tensor | None = None) -> torch.Tensor:
        """Σᵢ wᵢ·min(1, C/‖∇ℓ(θ; dᵢ)‖)·∇ℓ(θ; dᵢ) for every model (leading dims of ``theta``): the clipped (``clips``
        broadcast to (..., 1); None: unclipped) and weighted (``weights`` (..., n); None: every example once) sum of
        the per-example gradients, without forming them. Every per-example gradient is aᵢ·θ₁ − bᵢ·d₁ᵢ on θ₁ (the
        gate's slope is parallel to θ₁) and cᵢ·(θ₂ − d₂ᵢ) on θ₂, so norms and sums are matrix products with the
        data (the tests check them against autograd)."""
        dim1 = d1.shape[-1]
        theta1, theta2 = theta[..., :dim1], theta[..., dim1:]
        inner1 = theta1 @ d1.T
        sq1 = _squared_distances(theta1, d1, inner1)
        sq2 = _squared_distances(theta2, d2)
        if self.kind == "convex":
            a = b = torch.ones_like(sq1)
            c = torch.full_like(sq2, self.scale / self.radius**2)
        else:
            q, slope = self.gate(theta1)
            b = (0.5 * sq1 < 4.5).to(theta.dtype)
            quad2 = sq2 / (2 * self.radius**2) - 0.5
            a = b + self.scale * torch.clamp(quad2, max=0.0) * slope
            c = self.scale * q * (quad2 < 0) / self.radius**2
        norms = (a.square() * theta1.square().sum(-1, keepdim=True) - 2 * a * b * inner1
                 + b.square() * d1.square().sum(-1) + c.square() * sq2).clamp_min(0.0).sqrt()
        w = torch.ones_like(norms) if weights is None else weights
        if clips is not None:
            w = w * torch.clamp(clips / norms.clamp_min(1e-300), max=1.0)
        return torch.cat([theta1 * (w * a).sum(-1, keepdim=True) - (w * b) @ d1,
                          theta2 * (w * c).sum(-1, keepdim=True) - (w * c) @ d2], dim=-1)


def _squared_distances(points: torch.Tensor, data: torch.Tensor, inner: torch.Tensor | None = None) -> torch.Tensor:
    """‖x − dᵢ‖² for every point x (..., k) and row dᵢ of ``data`` (n, k): (..., n), from the inner products
    (``inner``, x·dᵢ, when already computed)."""
    inner = points @ data.T if inner is None else inner
    return (points.square().sum(-1, keepdim=True) - 2 * inner + data.square().sum(-1)).clamp_min(0.0)


@dataclass(frozen=True)
class Sizes:
    """The data of one draw, and the spreads of d₁ and d₂."""

    private: int = 20
    """Few enough that cold private training misses the basin at +M in a fifth of its chains at ε = 1 (20 %
    over 4 probe seeds × 16 chains, tuned), so the regime gate (:data:`MISS_FLOOR`) can pass; at 50 it chose the
    right basin in 97–100 % of chains, at 500 always (a one-dimensional choice is easy privately once εn is
    large)."""
    public: int = 20
    validation: int = 2000
    test: int = 5000
    dim1: int = 1  # D: θ₁'s dimension (1 in the paper's figure; the high-dimensional regime's is large)
    dim2: int = 4  # m
    spread1: float = 0.5  # s₁: the norm of d₁'s spread (per coordinate s₁/√D)
    spread2: float = 0.5  # s₂ / r (per coordinate)


@dataclass(frozen=True)
class Data:
    """d₁ (n, D) and d₂ (n, m) for each split, and the population's (M·e₁, μ₂)."""

    private: tuple[torch.Tensor, torch.Tensor]
    public: tuple[torch.Tensor, torch.Tensor]
    validation: tuple[torch.Tensor, torch.Tensor]
    test: tuple[torch.Tensor, torch.Tensor]
    optimum: torch.Tensor  # (D + m,)


def make_data(land: Landscape, sizes: Sizes, seed: int | str) -> Data:
    """One draw: θ₁'s population minimum M·e₁ (DP-SGD's noise is isotropic, so one direction serves for all), μ₂ a
    uniformly random direction of norm r/2; every split i.i.d. from the same distribution."""
    gen = torch_generator(NAME, seed, "data")
    direction = torch.randn(sizes.dim2, generator=gen, dtype=DTYPE)
    mu2 = direction / direction.norm() * land.radius / 2
    theta1 = torch.zeros(sizes.dim1, dtype=DTYPE)
    theta1[0] = land.center

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        d1 = theta1 + sizes.spread1 / math.sqrt(sizes.dim1) * torch.randn(n, sizes.dim1, generator=gen, dtype=DTYPE)
        d2 = mu2 + sizes.spread2 * land.radius * torch.randn(n, sizes.dim2, generator=gen, dtype=DTYPE)
        norms = d2.norm(dim=1, keepdim=True)
        return d1, d2 * torch.clamp(land.radius / norms, max=1.0)

    return Data(split(sizes.private), split(sizes.public), split(sizes.validation), split(sizes.test),
                torch.cat([theta1, mu2]))


def excess_loss(land: Landscape, theta: torch.Tensor, split: tuple[torch.Tensor, torch.Tensor],
                optimum: torch.Tensor) -> torch.Tensor:
    """Mean loss on the split minus the loss at (M, μ₂), per model (leading dims of ``theta``)."""
    base = land.losses(optimum, *split).mean()
    return torch.stack([land.losses(row, *split).mean(-1) for row in theta.reshape(-1, theta.shape[-1])]
                       ).reshape(theta.shape[:-1]) - base


def private_sgd(land: Landscape, data: tuple[torch.Tensor, torch.Tensor], theta: torch.Tensor, lrs: torch.Tensor,
                clips: torch.Tensor, noise_multipliers: Sequence[float], sampling_rate: float,
                generator: torch.Generator) -> torch.Tensor:
    """DP-SGD for every (lr, C) row and replicate chain: ``theta`` (G, K, D + m). Step t draws each chain's Poisson
    batch (K, n) and standard normal (K, D + m) from ``generator`` (shared by the G rows and by every arm given the
    same generator: common random numbers), clips per example, adds z_t·C times the normal and divides by qn."""
    d1, d2 = data
    n = d1.shape[0]
    chains = theta.shape[1]
    for z in noise_multipliers:
        batch = (torch.rand(chains, n, generator=generator, dtype=DTYPE) < sampling_rate).to(DTYPE)
        standard = torch.randn(chains, theta.shape[-1], generator=generator, dtype=DTYPE)
        summed = land.gradient_sum(theta, d1, d2, clips[:, None, None], batch)
        noisy = (summed + z * clips[:, None, None] * standard) / (sampling_rate * n)
        theta = theta - lrs[:, None, None] * noisy
    return theta


def public_gd(land: Landscape, data: tuple[torch.Tensor, torch.Tensor], theta: torch.Tensor, steps: int,
              lr: float) -> torch.Tensor:
    """``steps`` full-batch gradient-descent steps on the public examples (non-private)."""
    for _ in range(steps):
        theta = theta - lr / data[0].shape[0] * land.gradient_sum(theta, *data)
    return theta


@dataclass(frozen=True)
class Plan:
    """The private run: epochs at Poisson rate q, and the public steps and their rate."""

    epochs: int = 8
    sampling_rate: float = 0.2
    public_steps: int = 200  # T_pub
    public_lr: float = 0.01  # r²/P: one step reaches the public θ₂
    pretrain_splits: tuple[int, ...] = (0, 50, 100, 150, 200)
    delta: float = 1e-5
    accountant: Literal["pld", "rdp"] = "pld"

    @property
    def steps_per_epoch(self) -> int:
        return round(1 / self.sampling_rate)

    @property
    def steps(self) -> int:
        return self.epochs * self.steps_per_epoch


SCHEDULES = ("even", "early", "late")


def noise_schedule(plan: Plan, schedule: str, epsilon: float, cache_dir: Path | None = None) -> list[float]:
    """z_t of every private step: one z (``even``), or the first/last epoch at √0.6·z; z calibrated so the planned
    run costs ε at δ (the boosted runs share one calibration: the same events in another order)."""
    sampling = PoissonSampling(plan.sampling_rate)
    boosted, rest = plan.steps_per_epoch, plan.steps - plan.steps_per_epoch

    def steps(z: float, count: int) -> dp_event.DpEvent:
        return run_event(sampling, [dp_event.GaussianDpEvent(z)], count)

    def planned(z: float) -> dp_event.DpEvent:
        if schedule == "even":
            return steps(z, plan.steps)
        return dp_event.ComposedDpEvent([steps(BOOST_NOISE_RATIO * z, boosted), steps(z, rest)])

    z = calibrate(planned, neighboring_relation(sampling), epsilon, plan.delta, plan.accountant, cache_dir)
    if schedule == "even":
        return [z] * plan.steps
    low = [BOOST_NOISE_RATIO * z] * boosted
    return low + [z] * rest if schedule == "early" else [z] * rest + low


def private_arms(plan: Plan) -> tuple[str, ...]:
    """The arms that train privately (and are tuned): the Table 2 schedules, then ``pre_<t>`` for Figure 4."""
    return (*SCHEDULES, *(f"pre_{t}" for t in plan.pretrain_splits))


def figure4_arms(plan: Plan) -> tuple[str, str]:
    """Figure 4's arms: every public step before private training, and every one after it."""
    return f"pre_{plan.pretrain_splits[-1]}", f"pre_{plan.pretrain_splits[0]}"


def compared(plan: Plan) -> tuple[tuple[str, str], ...]:
    """(better, worse) of every claim and control: each is judged at the arms' own points and with the better arm
    at the worse arm's (the control's) tuned point."""
    first, last = figure4_arms(plan)
    return ("early", "late"), ("early", "even"), (first, last), (first, "even"), ("late", "early"), (last, first)


def arms(plan: Plan) -> tuple[str, ...]:
    """Every arm's name: the private arms at their own tuned points, each claim's better arm at its control's point
    (:func:`at_point`), ``public_only`` and ``origin``."""
    return (*private_arms(plan), *(at_point(better, worse) for better, worse in compared(plan)), "public_only",
            "origin")


def run_arm(land: Landscape, data: Data, plan: Plan, arm: str, zs: Mapping[str, list[float]], lrs: torch.Tensor,
            clips: torch.Tensor, replicates: int, stream: int | str) -> torch.Tensor:
    """The final models of one arm, (G, K, D + m), for the (lr, C) rows; ``stream`` names the batches and noise
    (the same for every arm of a seed)."""
    theta = torch.zeros(lrs.numel(), replicates, data.optimum.numel(), dtype=DTYPE)
    generator = torch_generator(NAME, stream, "train")
    rate = plan.sampling_rate
    if arm in SCHEDULES:
        return private_sgd(land, data.private, theta, lrs, clips, zs[arm], rate, generator)
    if arm == "public_only":
        return public_gd(land, data.public, theta, plan.public_steps, plan.public_lr)
    if arm == "origin":
        return theta
    before = int(arm.removeprefix("pre_"))
    theta = public_gd(land, data.public, theta, before, plan.public_lr)
    theta = private_sgd(land, data.private, theta, lrs, clips, zs["even"], rate, generator)
    return public_gd(land, data.public, theta, plan.public_steps - before, plan.public_lr)


TUNED = ("lr", "C")
LR_GRID = (0.0025, 0.005, 0.01, 0.02)
CLIP_GRID = (0.3, 1.0, 3.0, 10.0)


TUNING_DRAWS = 3
"""Tuning draws of the full mode (named ``tune<i>``: disjoint from the test seeds)."""
MAX_EXTENSIONS = 4
"""Extensions of the union grid past an edge (with 2, the full run's tuned lr still sat on the grid's top edge)."""


def tune_arms(land: Landscape, draws: Sequence[Data], plan: Plan, zs: Mapping[str, list[float]], replicates: int,
              grid: tuple[tuple[float, ...], tuple[float, ...]]) -> dict[str, Tuning]:
    """(lr, C) of every private arm on the tuning draws' validation splits (mean excess loss over draws and chains,
    lowest wins), jointly on one union grid; the initial grid is trained in one batch an arm, extensions point by
    point."""
    def scorer(arm: str) -> Callable[[Mapping[str, float]], float]:
        scored: dict[tuple[float, float], float] = {}

        def train(points: Sequence[tuple[float, float]]) -> None:
            lrs = torch.tensor([p[0] for p in points], dtype=DTYPE)
            clips = torch.tensor([p[1] for p in points], dtype=DTYPE)
            total = torch.zeros(len(points), dtype=DTYPE)
            for i, data in enumerate(draws):
                theta = run_arm(land, data, plan, arm, zs, lrs, clips, replicates, f"tune{i}")
                loss = excess_loss(land, theta, data.validation, data.optimum).mean(-1)
                total += torch.nan_to_num(loss, nan=math.inf)
            for point, value in zip(points, total / len(draws)):
                scored[point] = float(value)

        train([(lr, c) for lr in grid[0] for c in grid[1]])

        def score(values: Mapping[str, float]) -> float:
            point = (values["lr"], values["C"])
            if point not in scored:
                train([point])
            return scored[point]

        return score

    axes = [Axis("lr", grid[0]), Axis("C", grid[1])]
    return tune_jointly(axes, {arm: scorer(arm) for arm in private_arms(plan)}, higher_is_better=False,
                        max_extensions=MAX_EXTENSIONS)


@dataclass(frozen=True)
class Outcome:
    """Per-seed test excess loss and the share of chains whose θ₁ ended in the basin at +M, per (arm, cell)."""

    values: dict[str, dict[str, dict[int, float]]]
    right_basin: dict[str, dict[str, dict[int, float]]]
    tunings: dict[tuple[str, str], Tuning]

    @property
    def measures(self) -> dict[str, dict[str, dict[int, float]]]:
        """The regime measure :data:`MISSED` per cell and seed, for the gates."""
        return {MISSED: {cell: {seed: 1.0 - share for seed, share in per.items()}
                         for cell, per in self.right_basin["even"].items()}}


def cell_name(kind: str, epsilon: float) -> str:
    return f"{kind} ε={epsilon:g}"


def run(kinds: Sequence[Kind], epsilons: Sequence[float], seeds: int, plan: Plan, sizes: Sizes, replicates: int,
        tuning_draws: int, grid: tuple[tuple[float, ...], tuple[float, ...]], cache_dir: Path | None = None,
        log: Callable[[str], None] = print) -> Outcome:
    """Tune every arm per (landscape, ε), then run it on every seed (paired: one data draw and stream a seed)."""
    values: dict[str, dict[str, dict[int, float]]] = {arm: {} for arm in arms(plan)}
    right: dict[str, dict[str, dict[int, float]]] = {arm: {} for arm in arms(plan)}
    tunings: dict[tuple[str, str], Tuning] = {}
    for kind in kinds:
        land = Landscape(kind)
        draws = [make_data(land, sizes, f"tune{i}") for i in range(tuning_draws)]
        for epsilon in epsilons:
            cell, tick = cell_name(kind, epsilon), time.perf_counter()
            zs = {s: noise_schedule(plan, s, epsilon, cache_dir) for s in SCHEDULES}
            joint = tune_arms(land, draws, plan, zs, replicates, grid)
            tunings.update({(arm, cell): tuning for arm, tuning in joint.items()})
            points = {arm: {"lr": 0.0, "C": 1.0} if arm in ("public_only", "origin")  # nothing private to tune
                      else joint[split_point(arm)[1]].best for arm in arms(plan)}
            rates = {arm: tuple(torch.tensor([point[k]], dtype=DTYPE) for k in TUNED) for arm, point in points.items()}
            for arm in arms(plan):
                values[arm][cell], right[arm][cell] = {}, {}
            for seed in range(seeds):  # a seed's data made once for every arm, and never all seeds' at once
                data = make_data(land, sizes, seed)
                for arm in arms(plan):
                    theta = run_arm(land, data, plan, split_point(arm)[0], zs, *rates[arm], replicates, seed)[0]
                    values[arm][cell][seed] = float(excess_loss(land, theta, data.test, data.optimum).mean())
                    right[arm][cell][seed] = float(land.in_basin(theta, data.optimum, sizes.dim1).to(DTYPE).mean())
            missed = 1 - statistics.fmean(right["even"][cell].values())
            regime = f"; cold even misses the basin at +M in {missed:.1%} of chains" if kind == "two_basin" else ""
            log(f"{cell} (z even {zs['even'][0]:.3f}{regime}) [{time.perf_counter() - tick:.0f} s]: " + ", ".join(
                    f"{arm} {statistics.fmean(values[arm][cell].values()):.4f}" for arm in arms(plan)))

    return Outcome(values, right, tunings)


TABLE2_FIGURE = ("Table 2 (CIFAR-10, 60 epochs, σ² = 0.6 on one epoch): first epoch 46.7 / 49.6 / 54.0 % vs last "
                 "epoch 46.3 / 48.0 / 52.0 % at ε = 1 / 3 / 8 (± 0.3–0.9)")
FIGURE4 = ("Figure 4 (CIFAR-10, T_pub = 200 public epochs): accuracy rises with the epochs spent on pretraining; all "
           "200 before private training is best")


THEOREM = ("Theorem 2.1: with n_pub ≪ n_priv, public pretraining then private fine-tuning reaches excess loss O(1/p) "
           "where private training alone (and public alone: the gate row) stays Ω(1)")


LEARNS_MARGIN = 0.005
"""How much lower (in excess loss) than the trivial predictor and than public-only alone the private arms must end
for private training to count as learning (a margin of 0 would let seed noise pass the gate; issue 45)."""
REGIME_GATE = AtLeast(MISSED, MISS_FLOOR, "share of chains in which cold private training misses the basin at +M")
"""A two-basin claim is testable only where the basin choice it is about is hard (:data:`MISS_FLOOR`)."""


def claims(plan: Plan, kinds: Sequence[Kind], epsilons: Sequence[float],
           tunings: Mapping[tuple[str, str], Tuning] | None = None) -> list[PairedClaim]:
    """The paper's claims on the two-basin landscape (each gated by :data:`REGIME_GATE`), their flipped predictions
    on the convex control, each at the arms' own tuned points and at the shared point, and the gates (private
    training must learn something, and the best arm must beat public-only), which also withhold every claim's and
    control's verdict in a cell where their means fail. ``tunings`` ((arm, cell) → its tuning): a cell where an arm
    of a claim has its learning rate at the grid's low edge is not testable."""
    def cells(kind: str) -> tuple[str, ...]:
        return tuple(cell_name(kind, e) for e in epsilons) if kind in kinds else ()

    def step_on(*arms_run: str) -> tuple[PrivateStepOn, ...]:
        """The gate that the learning rates the arms ran at (their own, or the control's) are off the low edge."""
        if not tunings:
            return ()
        return (PrivateStepOn(arms_run, at_low_edge=low_edges(arms_run, tunings, "lr")),)

    def both_points(text: str, better: str, worse: str, cells: tuple[str, ...], gates: tuple, **kw) -> list:
        own = PairedClaim(text, better, worse, cells, gates=(*gates, *step_on(better, worse)), **kw)
        shared = PairedClaim(f"{text} — both at {worse}'s tuned (lr, C)", at_point(better, worse), worse, cells,
                             gates=(*gates, *step_on(at_point(better, worse), worse)), **kw)
        return [own, shared]

    first, last = figure4_arms(plan)
    learns = (Beats(("even",), "origin", LEARNS_MARGIN, "the trivial predictor θ = 0", higher_is_better=False),
              Beats((first,), "public_only", LEARNS_MARGIN, "public only", higher_is_better=False))
    gated = (REGIME_GATE, *learns)
    found = [
        *both_points("Two basins: more budget in the first epoch beats more in the last (Table 2)", "early", "late",
                     cells("two_basin"), gated, paper_figure=TABLE2_FIGURE),
        *both_points("Two basins: more budget in the first epoch beats an even spend", "early", "even",
                     cells("two_basin"), gated, paper_figure="§3.1: 'reducing privacy noise in the earlier rounds of "
                     "training is more beneficial'"),
        *both_points("Two basins: all public steps before private training beat all after it (Figure 4)", first,
                     last, cells("two_basin"), gated, paper_figure=FIGURE4),
        *both_points("Two basins: public pretraining then private training beats private training alone "
                     "(Theorem 2.1)", first, "even", cells("two_basin"), (REGIME_GATE,), paper_figure=THEOREM),
        *both_points("Convex control: the last epoch's budget beats the first's (the prediction flips)", "late",
                     "early", cells("convex"), learns, role="control"),
        *both_points("Convex control: public steps after private training beat those before (the prediction flips)",
                     last, first, cells("convex"), learns, role="control"),
        PairedClaim("Gate: cold private training beats the trivial predictor θ = 0", "even", "origin",
                    cells("two_basin") + cells("convex"), role="gate"),
        PairedClaim("Gate: public pretraining then private training beats public only", first, "public_only",
                    cells("two_basin") + cells("convex"), role="gate"),
    ]
    return [c for c in found if c.cells]


TITLE = "Seed 001, Table 2 and Figure 4 on the paper's two-basin construction (eq. 1–2), with a convex control"
PAPER = ("Ganesh et al. 2023, \"Why is public pretraining necessary for private model training?\", §2 eq. 1–2 (the "
         "construction, Figure 2's one-dimensional toy) and §3.1 (Table 2, Figure 4).")


def write_outputs(out: Path, outcome: Outcome, found: Sequence[PairedClaim], regime: Regime, seeds: int,
                  replicates: int, draws: int, wall: float, quick: bool) -> list[str]:
    """paired.json, comparison.md, tuning.md and claims.json; returns the comparison's claim lines."""
    out.mkdir(parents=True, exist_ok=True)
    plan, sizes = regime.plan, regime.sizes
    write_paired_json(out, regime.name, "test excess loss", False, outcome.values, found, outcome.measures)
    lines = [paired_line(outcome.values, c, higher_is_better=False) for c in found]
    basin = [f"- {arm}: " + ", ".join(f"{cell} {statistics.fmean(per.values()):.2f}" for cell, per in cells.items())
             for arm, cells in outcome.right_basin.items()]
    gate_lines = [f"- {cell}: cold `even` misses the basin at +M in {statistics.fmean(per.values()):.1%} of chains "
                  f"(gate ≥ {MISS_FLOOR:.0%}: {'passes' if statistics.fmean(per.values()) >= MISS_FLOOR else 'fails'})"
                  for cell, per in outcome.measures[MISSED].items() if cell.startswith("two_basin")]
    write_text_atomic(out / "tuning.md", "\n".join(
        ["# Two-basin construction: tuning (lr, C) on separate draws", ""]
        + [f"- **{arm}, {cell}**: {t.markdown()}" for (arm, cell), t in outcome.tunings.items()]) + "\n")
    evaluations = sum(t.evaluations for t in outcome.tunings.values())
    flagged = [f"{arm} {cell} ({', '.join(t.on_edge)})" for (arm, cell), t in outcome.tunings.items() if t.on_edge]
    per_arm = sorted({t.evaluations for t in outcome.tunings.values()})
    tuning = (f"Every private arm tuned over (lr, C) jointly on one union grid per cell (initial lr {list(LR_GRID)}, "
              f"C {list(CLIP_GRID)}; an edge extended for one arm is extended for all) on {draws} tuning draws "
              f"disjoint from the test seeds, lowest validation excess loss: {evaluations} evaluations, "
              f"{'/'.join(map(str, per_arm))} points per arm (tuning.md); "
              + (f"still on an edge: {'; '.join(flagged)}. " if flagged else "none on an edge. ")
              + "Each claim judged at the arms' own points and with both at the control's (the worse arm's) point. "
              "Not counted in ε.")
    setup = (f"{sizes.private} private, {sizes.public} public examples a draw; D = {sizes.dim1}, m = {sizes.dim2}; "
             f"{plan.epochs} epochs "
             f"at q = {plan.sampling_rate:g} ({plan.steps} steps), δ = {plan.delta:g}, {plan.accountant.upper()} "
             f"accountant; T_pub = {plan.public_steps} public GD steps at lr {plan.public_lr:g}; {seeds} seeds × "
             f"{replicates} chains; wall time {wall:.0f} s.")
    write_text_atomic(out / "comparison.md", "\n".join([
        f"# {regime.title}", "", PAPER, "", setup, "", "## Paired differences (test excess loss, lower is better)", "",
        *lines, "", "## Judged (paired t on the seeds, Holm over ε, the gates first)", "", RULE, "",
        *(judgement(outcome.values, c, False, outcome.measures).sentence(c.text, c.better, c.worse) for c in found),
        "", "## Regime gate of the two-basin claims", "", *gate_lines, "",
        "## Share of chains ending in the basin at +M (mean over seeds)", "", *basin, "", tuning, ""]))
    command = (f"python -m fedpub.simulations.reproductions.{NAME}"
               + (f" --regime {regime.key}" if regime.key != DEFAULT_REGIME else "") + (" --quick" if quick else ""))
    write_claims_json(out, ReproductionRecord(
        regime.name, "001", regime.title, PAPER, command, quick, seeds, wall, tuning, RULE,
        tuple(ClaimRecord.of(c.text, c.better, c.worse, judgement(outcome.values, c, False, outcome.measures),
                             c.paper_figure)
              for c in found),
        ("comparison.md", "tuning.md"), ()))
    return lines


@dataclass(frozen=True)
class Regime:
    """Where the construction is run: its record's name and title, the private run and the data, the default seeds
    and chains."""

    key: str
    name: str
    title: str
    plan: Plan
    sizes: Sizes
    seeds: int
    replicates: int


DEFAULT_REGIME = "figure2"
REGIMES = {
    DEFAULT_REGIME: Regime(DEFAULT_REGIME, NAME, TITLE, Plan(), Sizes(), seeds=20, replicates=16),
    "high_dim": Regime(
        "high_dim", f"{NAME}_high_dim",
        "Seed 001 in the regime of its Theorem 2.1: the two-basin construction with θ₁ in 2,000 dimensions, 100 "
        "private and 5 public examples, with a convex control",
        Plan(public_steps=400, pretrain_splits=(0, 100, 200, 300, 400)),
        Sizes(private=100, public=5, validation=500, test=2000, dim1=2000), seeds=50, replicates=8),
}
"""``figure2``: the paper's one-dimensional toy (Figure 2), where a private choice of one of two basins is easy once
εn is large. ``high_dim`` (fedpub issue 45, item 5): θ₁ high-dimensional (the theorem's θ₁ has p⁴ coordinates), far
fewer public than private examples, so private mean estimation of θ₁ — reaching the shell where ℓ₂ opens — is hard
at the noise ε asks for while 5 public examples find it, and 5 public examples estimate θ₂ worse than 100 private
ones; 400 public GD steps at lr 0.01 bring θ₁ to within 2 % of the public minimum."""

QUICK_PLAN = Plan(epochs=2, sampling_rate=0.1, public_steps=40, pretrain_splits=(0, 40), accountant="rdp")
QUICK_SIZES = Sizes(private=100, public=10, validation=200, test=300)


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regime", choices=sorted(REGIMES), default=DEFAULT_REGIME,
                        help=f"the paper's one-dimensional toy ({DEFAULT_REGIME}, default) or Theorem 2.1's "
                             "high-dimensional regime (high_dim, its own folder)")
    parser.add_argument("--seeds", type=int, default=None, help="paired seeds (default 20; high_dim 50)")
    parser.add_argument("--epsilons", default="1,3,8", help="target ε list (default 1,3,8: Table 2's)")
    parser.add_argument("--replicates", type=int, default=None, help="chains a seed (default 16; high_dim 8)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"output folder (default {default_out(NAME, False)}, quick: {default_out(NAME, True)}; "
                             "high_dim: the regime's name in place of two_basin)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny data, 2 epochs, ε = 1, 3 seeds × 4 chains, a 2×2 grid, RDP: seconds, for the tests")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    regime = REGIMES[args.regime]
    out = args.out or default_out(regime.name, args.quick)
    start = time.perf_counter()
    if args.quick:
        regime = replace(regime, plan=QUICK_PLAN, sizes=replace(QUICK_SIZES, dim1=min(regime.sizes.dim1, 50)))
        epsilons, seeds, replicates, draws, grid = [1.0], 3, 4, 1, ((0.005, 0.01), (1.0, 3.0))
    else:
        seeds, replicates = args.seeds or regime.seeds, args.replicates or regime.replicates
        draws, epsilons, grid = TUNING_DRAWS, [float(e) for e in args.epsilons.split(",")], (LR_GRID, CLIP_GRID)
    outcome = run(KINDS, epsilons, seeds, regime.plan, regime.sizes, replicates, draws, grid)
    found = claims(regime.plan, KINDS, epsilons, outcome.tunings)
    lines = write_outputs(out, outcome, found, regime, seeds, replicates, draws, time.perf_counter() - start,
                          args.quick)
    print("\n".join(lines))
    print(f"wall time {time.perf_counter() - start:.1f} s; results in {out}")
    return out


if __name__ == "__main__":
    main()
