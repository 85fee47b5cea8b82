"""``fedpub audit``: one-shot empirical privacy estimation with canary clients (Andrew, Chen, Kairouz, Oh,
Oprea, McMahan & Suriyakumar, "One-shot Empirical Privacy Estimation for Federated Learning", ICLR 2024;
the final-model variant).

k canary users each hold a secret direction c_i, uniform on the unit sphere of R^d (d model parameters).
The first half are inserted: like every private user they join each round with the sampling rate q (m/N
for fixed-size sampling), and then send 10·C·c_i, which clipping turns into C·c_i; they pass through the
strategy's clip and noise with the real users (``run_in_process``'s ``extra_updates``). The other half are
held out. With Δ = θ_T − θ_0, the held-out cosines <Δ, c_i>/‖Δ‖ are the null distribution (≈ N(0, 1/d));
the inserted ones are shifted by what the final model remembers of them. Fitting Gaussians gives
μ = (mean_in − mean_out) / std_out; read as μ-GDP, that is (ε, δ)-DP at the run's δ (Dong, Roth & Su 2019,
Cor. 2.13), with a 95% interval from bootstrapping the canaries.

The audited claim is the accountant's ε of the configured run, for its population N: the canaries are not
users of the accountant (they only join the cohort). ``noise_scale`` breaks the mechanism on purpose: the
run adds noise z·noise_scale while the claim stays the ε of z.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import torch
from scipy.optimize import brentq  # scipy comes with dp-accounting
from scipy.special import log_ndtr, ndtri

from clients.local_training import model_params
from fedpub.atomic import atomic_path, write_json_atomic
from fedpub.config import ExperimentConfig, parse_config
from fedpub.seeding import numpy_generator, torch_generator
from fedpub.types import Params, Updates
from simulations.compare import deep_merge
from simulations.engine import run_in_process
from simulations.experiment import Experiment, build_experiment
from simulations.run_dir import RunDirectory

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CANARY_NORM = 10.0
"""A canary's update norm in clip norms: clipping scales it to exactly C."""
VIOLATION = "VIOLATION: empirical ε exceeds the accountant's"


def _flat(params: Params) -> torch.Tensor:
    return torch.cat([v.detach().reshape(-1).to("cpu", torch.float64) for v in params.values()])


@dataclass(frozen=True)
class Canaries:
    """``count`` canary users over parameters shaped like ``template``: the first ``count // 2`` join each
    round with probability ``rate``, the others never; every draw comes from ``seed``."""

    count: int
    rate: float
    norm: float
    template: Params
    seed: int

    @property
    def inserted(self) -> int:
        return self.count // 2

    def direction(self, i: int) -> torch.Tensor:
        """c_i, a flat float64 unit vector (regenerated, never stored: k·d numbers can be large)."""
        d = sum(v.numel() for v in self.template.values())
        v = torch.randn(d, generator=torch_generator(self.seed, "canary", i), dtype=torch.float64)
        return v / v.norm()

    def joined(self, round_index: int) -> list[int]:
        """The inserted canaries taking part in round ``round_index``."""
        rng = numpy_generator(self.seed, round_index, "canary_cohort")
        return np.flatnonzero(rng.random(self.inserted) < self.rate).tolist()

    def updates(self, round_index: int) -> list[Updates]:
        """The updates the round's canaries send: norm · c_i, shaped like the model."""
        sizes = [v.numel() for v in self.template.values()]
        out = []
        for i in self.joined(round_index):
            parts = torch.split(self.direction(i) * self.norm, sizes)
            out.append({k: p.view_as(v).to(v) for (k, v), p in zip(self.template.items(), parts)})
        return out

    def cosines(self, delta: torch.Tensor) -> np.ndarray:
        """cos(Δ, c_i) of every canary, the inserted ones first."""
        unit = delta / delta.norm()
        return np.array([float(unit @ self.direction(i)) for i in range(self.count)])


def gdp_epsilon(mu: float, delta: float) -> float:
    """The ε at which μ-GDP is (ε, δ)-DP: the root of δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth &
    Su 2019, Cor. 2.13), solved in log space; 0 when μ ≤ 0 or when ε = 0 already meets δ."""
    if mu <= 0 or math.isinf(mu):
        return max(mu, 0.0)

    def log_excess(eps: float) -> float:  # log δ(ε) − log δ, decreasing in ε
        a, b = log_ndtr(-eps / mu + mu / 2), log_ndtr(-eps / mu - mu / 2)
        return a + math.log(-math.expm1(eps + b - a)) - math.log(delta)

    if log_excess(0.0) <= 0:
        return 0.0
    return brentq(log_excess, 0.0, mu * (mu / 2 - ndtri(delta)) + 1.0)  # δ(ε) < Φ(−ε/μ + μ/2) < δ there


def _mu(inserted: np.ndarray, held_out: np.ndarray) -> float:
    shift, spread = float(inserted.mean() - held_out.mean()), float(held_out.std(ddof=1))
    if spread == 0:  # a bootstrap resample of a few held-out canaries can repeat one value
        return math.inf if shift > 0 else 0.0
    return shift / spread


def estimate(
    inserted: np.ndarray, held_out: np.ndarray, delta: float, *, seed: int = 0, resamples: int = 200
) -> tuple[float, float, tuple[float, float]]:
    """μ, its ε at ``delta``, and the 95% percentile interval of ε over ``resamples`` bootstrap
    resamples of the inserted and the held-out canaries."""
    rng = numpy_generator(seed, "audit_bootstrap")
    boot = [
        gdp_epsilon(_mu(rng.choice(inserted, inserted.size), rng.choice(held_out, held_out.size)), delta)
        for _ in range(resamples)
    ]
    low, high = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")  # order statistics: ε may be inf
    mu = _mu(inserted, held_out)
    return mu, gdp_epsilon(mu, delta), (float(low), float(high))


@dataclass(frozen=True)
class AuditResult:
    """One audit run: both ε, the estimate (μ, ε and its interval) and the cosines it comes from."""

    run_dir: Path
    noise_scale: float
    noise_multiplier_claimed: float
    noise_multiplier_used: float
    claimed_epsilon: float
    """The accountant's ε of the configured mechanism (noise multiplier claimed), for T rounds."""
    run_epsilon: float
    """The accountant's ε of the mechanism that ran (noise multiplier used)."""
    empirical_epsilon: float
    interval: tuple[float, float]
    mu: float
    delta: float
    rounds: int
    canaries: int
    seed: int
    dimension: int
    inserted_cosine_mean: float
    inserted_cosine_std: float
    held_out_cosine_mean: float
    held_out_cosine_std: float
    verdict: str


def check_options(canaries: int, noise_scales: Sequence[float]) -> None:
    """Raise ValueError for fewer than 4 canaries or a noise scale that is not a positive number."""
    if canaries < 4:
        raise ValueError(f"canaries must be at least 4 (half inserted, half held out), got {canaries}")
    bad = [s for s in noise_scales if not (s > 0 and math.isfinite(s))]
    if bad:
        raise ValueError(f"noise scales must be finite numbers > 0, got {', '.join(map(str, bad))}")


def claimed_epsilon(experiment: Experiment) -> float:
    """The accountant's ε after every configured round; ValueError for a run the audit cannot judge."""
    cfg = experiment.config
    moving = [s for s in ("adaptive_clip", "budget_schedule", "public_schedule") if getattr(cfg.strategy, s)]
    if moving:
        raise ValueError(f"strategy.{moving[0]} changes the clip or noise between rounds; the audit needs the "
                         "same mechanism every round")
    if math.isinf(cfg.strategy.clip_norm):
        raise ValueError("strategy.clip_norm is infinite: no privacy is claimed, there is nothing to audit")
    accountant = experiment.new_accountant()
    accountant.compose(experiment.planned_round_event, cfg.rounds)
    epsilon = accountant.epsilon(cfg.privacy.delta)
    if experiment.budget_epsilon is not None and epsilon > experiment.budget_epsilon:
        raise ValueError(f"privacy.budget_epsilon={experiment.budget_epsilon:g} stops the run before its "
                         f"{cfg.rounds} rounds (ε {epsilon:.4g}); the audit needs every round")
    return epsilon


def write_cosine_plot(path: Path, inserted: np.ndarray, held_out: np.ndarray, audit: AuditResult) -> None:
    """Histograms of the inserted and held-out canaries' cosines."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    bins = np.histogram_bin_edges(np.concatenate([inserted, held_out]), bins=40)
    ax.hist(held_out, bins=bins, alpha=0.6, label=f"held out ({held_out.size})")
    ax.hist(inserted, bins=bins, alpha=0.6, label=f"inserted ({inserted.size})")
    ax.set_xlabel("cos(θ_T − θ_0, canary direction)")
    ax.set_ylabel("canaries")
    low, high = audit.interval
    ax.set_title(f"noise ×{audit.noise_scale:g}: μ = {audit.mu:.3g}, empirical ε = {audit.empirical_epsilon:.3g} "
                 f"[{low:.3g}, {high:.3g}], claimed ε = {audit.claimed_epsilon:.3g}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def run_audit(
    config: ExperimentConfig,
    *,
    canaries: int = 1000,
    noise_scale: float = 1.0,
    seed: int = 0,
    out_dir: Path | None = None,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> AuditResult:
    """Train ``config`` with ``canaries`` canary users and noise multiplier z·``noise_scale`` in
    ``<out_dir or output_dir>/<name>_audit_x<scale>_k<canaries>_s<seed>/`` (resumed like any run; ``fresh``
    starts over), then estimate ε from the final model and write ``audit.json`` and ``cosines.png``."""
    check_options(canaries, [noise_scale])
    configured = build_experiment(config)
    claimed = claimed_epsilon(configured)
    z = configured.noise_multiplier
    audited = parse_config(deep_merge(config.model_dump(mode="json"), {
        "name": f"{config.name}_audit_x{noise_scale:g}_k{canaries}_s{seed}",
        "output_dir": str(out_dir if out_dir is not None else config.output_dir),
        "strategy": {"noise_multiplier": z * noise_scale, "target_epsilon": None},
        "privacy": {"budget_epsilon": None},
    }))
    experiment = build_experiment(audited)
    strategy = experiment.strategy
    initial = {k: v.to(experiment.device) for k, v in model_params(experiment.new_model()).items()}
    users = Canaries(
        canaries, strategy.expected_cohort / strategy.population, CANARY_NORM * config.strategy.clip_norm,
        initial, seed,
    )
    run_dir = RunDirectory(audited.output_dir / audited.name)
    result = run_in_process(experiment, run_dir, fresh=fresh, on_round=on_round, extra_updates=users.updates)
    theta_0 = _flat(initial)
    cosines = users.cosines(_flat(result.params) - theta_0)
    inserted, held_out = cosines[: users.inserted], cosines[users.inserted :]
    mu, empirical, interval = estimate(inserted, held_out, result.delta, seed=seed)
    audit = AuditResult(
        run_dir=run_dir.root,
        noise_scale=noise_scale,
        noise_multiplier_claimed=z,
        noise_multiplier_used=experiment.noise_multiplier,
        claimed_epsilon=claimed,
        run_epsilon=result.epsilon,
        empirical_epsilon=empirical,
        interval=interval,
        mu=mu,
        delta=result.delta,
        rounds=result.rounds_done,
        canaries=canaries,
        seed=seed,
        dimension=theta_0.numel(),
        inserted_cosine_mean=float(inserted.mean()),
        inserted_cosine_std=float(inserted.std(ddof=1)),
        held_out_cosine_mean=float(held_out.mean()),
        held_out_cosine_std=float(held_out.std(ddof=1)),
        verdict="consistent" if interval[0] <= claimed else VIOLATION,
    )
    write_json_atomic(run_dir.root / "audit.json", {**asdict(audit), "run_dir": str(run_dir.root)})
    write_cosine_plot(run_dir.root / "cosines.png", inserted, held_out, audit)
    return audit
