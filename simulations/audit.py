"""``fedpub audit``: one-shot empirical privacy estimation with canary clients (Andrew, Kairouz, Oh, Oprea,
McMahan & Suriyakumar, "One-shot Empirical Privacy Estimation for Federated Learning", ICLR 2024),
against an attacker who sees the final model (``observe="final"``) or every round's model
(``observe="all-iterates"``).

k canary users each hold a secret direction c_i, uniform on the unit sphere of R^d (d model parameters).
The first half are inserted: like every private user they join each round with the sampling rate q (m/N
for fixed-size sampling), and then send 10·C·c_i, which clipping turns into C·c_i; they pass through the
strategy's clip and noise with the real users (``run_in_process``'s ``extra_updates``). The other half are
held out. With Δ = θ_T − θ_0, the held-out cosines <Δ, c_i>/‖Δ‖ are the null distribution (≈ N(0, 1/d));
the inserted ones are shifted by what the final model remembers of them. Fitting Gaussians gives
μ = (mean_in − mean_out) / std_out; read as μ-GDP, that is (ε, δ)-DP at the run's δ (Dong, Roth & Su 2019,
Cor. 2.13), with a 95% interval from bootstrapping the canaries.

All iterates (the paper's threat model where every model delta is released, as fedpub's global model is
to every sampled user each round): a canary's statistic is max_t cos(θ_{t+1} − θ_t, c_i), the largest
cosine of c_i with any round's model delta, as in the authors' code (google-research/federated,
``one_shot_epe/fed_avg_with_canaries.py`` keeps running maxima of the cosines of each round's model delta
with the inserted and with separate held-out canaries). The held-out maxima (of T cosines ≈ N(0, 1/d)) are
not Gaussian, but a Gaussian is still fitted to each sample, its own mean and std, and ε is the exact ε of
the two, N(mean_out, std_out²) vs N(mean_in, std_in²) (:func:`gaussians_epsilon`; the two-Gaussian
estimator ``epsilon_two_gaussians`` of the authors' ``one_shot_epe/empirical_privacy_estimation_lib.py``):
the inserted maxima, a mixture over how often each canary joined, are wider than the held-out ones, which
this fit counts and the final variant's equal-std μ-GDP would not. (Read from the authors' code; the text
of the paper's all-iterates algorithm was not at hand.) A round's k cosines are one matrix-vector product
(the k × d canary matrix is kept in memory up to :data:`MATRIX_BYTES`), appended to :data:`ROUND_COSINES`
in the run directory, so a resumed audit keeps those of the rounds its checkpoint covers.

The audited claim is the accountant's ε of the configured run, for its population N: the canaries are not
users of the accountant (they only join the cohort). ``noise_scale`` breaks the mechanism on purpose: the
run adds noise z·noise_scale while the claim stays the ε of z.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, get_args

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
Observe = Literal["final", "all-iterates"]
"""What the attacker sees: the final model, or every round's model."""
OBSERVE: tuple[str, ...] = get_args(Observe)
MATRIX_BYTES = 1 << 30
"""The canary directions are kept as one k × d float64 matrix up to this size, else drawn again at each use."""
ROUND_COSINES = "canary_round_cosines.f64"
"""In an all-iterates audit's run directory: per round, its index and its k cosines (float64)."""


def output_names(observe: Observe) -> tuple[str, str]:
    """The audit's JSON and plot file names in the run directory (the final variant's are the plain ones)."""
    suffix = "" if observe == "final" else "_" + observe.replace("-", "_")
    return f"audit{suffix}.json", f"cosines{suffix}.png"


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

    @property
    def dimension(self) -> int:
        return sum(v.numel() for v in self.template.values())

    def _draw(self, i: int) -> torch.Tensor:
        v = torch.randn(self.dimension, generator=torch_generator(self.seed, "canary", i), dtype=torch.float64)
        return v / v.norm()

    @cached_property
    def _matrix(self) -> torch.Tensor | None:
        """Every c_i as a row, or None when k·d float64 exceed :data:`MATRIX_BYTES` (then drawn at each use)."""
        if self.count * self.dimension * 8 > MATRIX_BYTES:
            return None
        return torch.stack([self._draw(i) for i in range(self.count)])

    def direction(self, i: int) -> torch.Tensor:
        """c_i, a flat float64 unit vector."""
        return self._draw(i) if self._matrix is None else self._matrix[i]

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
        """cos(Δ, c_i) of every canary, the inserted ones first (all 0 for Δ = 0)."""
        norm = delta.norm()
        if norm == 0:
            return np.zeros(self.count)
        unit = delta / norm
        if self._matrix is not None:
            return (self._matrix @ unit).numpy()
        return np.array([float(unit @ self._draw(i)) for i in range(self.count)])


class RoundCosines:
    """``on_model`` hook of :func:`~simulations.engine.run_in_process`: appends round t's cosines
    cos(θ_{t+1} − θ_t, c_i) to ``path`` (:data:`ROUND_COSINES`) as each round ends. A run's first round t
    (t > 0 when resumed from a checkpoint) first checks that rounds < t are on file, then drops the records
    of rounds ≥ t (redone, as ``metrics.jsonl``'s are) and a record cut short by a kill."""

    def __init__(self, canaries: Canaries, path: Path) -> None:
        self.canaries, self.path, self._started = canaries, path, False

    def __call__(self, round_index: int, before: Params, after: Params) -> None:
        if not self._started:
            kept = self._records()
            self._table(kept, round_index)  # raises if an earlier round is missing
            with atomic_path(self.path) as tmp:
                kept[kept[:, 0] < round_index].tofile(tmp)
            self._started = True
        cosines = self.canaries.cosines(_flat(after) - _flat(before))
        with self.path.open("ab") as f:
            np.concatenate([[float(round_index)], cosines]).astype(np.float64).tofile(f)

    def _records(self) -> np.ndarray:
        width = self.canaries.count + 1
        flat = np.fromfile(self.path, dtype=np.float64) if self.path.exists() else np.empty(0)
        return flat[: flat.size // width * width].reshape(-1, width)

    def _table(self, records: np.ndarray, rounds: int) -> np.ndarray:
        table, seen = np.zeros((rounds, self.canaries.count)), np.zeros(rounds, dtype=bool)
        for row in records:  # the last record of a round wins (a redone round is bit-identical anyway)
            t = int(row[0])
            if t < rounds:
                table[t], seen[t] = row[1:], True
        if not seen.all():
            missing = np.flatnonzero(~seen)
            raise ValueError(
                f"{self.path.parent} has no per-round canary cosines for {missing.size} of its first {rounds} "
                f"rounds (from round {missing[0]}): they were trained by an audit of the final model only; "
                "rerun the all-iterates audit with --fresh"
            )
        return table

    def rounds(self, count: int) -> np.ndarray:
        """The (count, k) cosines of rounds 0, …, count − 1; ValueError when one is missing."""
        return self._table(self._records(), count)

    def maxima(self, count: int) -> np.ndarray:
        """The all-iterates statistic: each canary's largest cosine over rounds 0, …, count − 1."""
        return self.rounds(count).max(axis=0)


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


def _log_mass(lo: float, hi: float, mean: float, std: float) -> float:
    """log P(lo < Y < hi) for Y ~ N(mean, std²), accurate far in either tail."""
    a, b = (lo - mean) / std, (hi - mean) / std
    if a > 0:  # both ends above the mean: upper tails, Φ(−a) − Φ(−b)
        a, b = -b, -a
    high, low = log_ndtr(b), log_ndtr(a)
    return high + math.log(-math.expm1(low - high)) if low < high else -math.inf


def _log_hockey_stick(eps: float, mean_p: float, std_p: float, mean_q: float, std_q: float) -> float:
    """log sup_S P(S) − e^ε Q(S) for P = N(mean_p, std_p²), Q = N(mean_q, std_q²): S is where the privacy
    loss log p/q = a y² + b y + c exceeds ε, a half line or the inside or outside of the roots' interval."""
    a = 0.5 / std_q**2 - 0.5 / std_p**2
    b = mean_p / std_p**2 - mean_q / std_q**2
    c = math.log(std_q / std_p) + 0.5 * (mean_q / std_q) ** 2 - 0.5 * (mean_p / std_p) ** 2 - eps
    if a == 0:
        if b == 0:
            return -math.inf  # P = Q
        cut = -c / b
        region = [(cut, math.inf)] if b > 0 else [(-math.inf, cut)]
    else:
        disc = b * b - 4 * a * c
        if disc <= 0:  # the loss stays on one side of ε: S is empty or everything, and 1 − e^ε ≤ 0
            return -math.inf
        q = -0.5 * (b + math.copysign(math.sqrt(disc), b))  # the roots q/a and c/q, without cancellation
        r1, r2 = sorted((q / a, c / q))
        region = [(r1, r2)] if a < 0 else [(-math.inf, r1), (r2, math.inf)]
    log_p = float(np.logaddexp.reduce([_log_mass(lo, hi, mean_p, std_p) for lo, hi in region]))
    log_q = float(np.logaddexp.reduce([_log_mass(lo, hi, mean_q, std_q) for lo, hi in region]))
    if log_p == -math.inf or eps + log_q >= log_p:
        return -math.inf
    return log_p + math.log(-math.expm1(eps + log_q - log_p))


def gaussians_epsilon(out_mean: float, out_std: float, in_mean: float, in_std: float, delta: float) -> float:
    """The smallest ε at which N(out_mean, out_std²) and N(in_mean, in_std²) are (ε, δ)-indistinguishable,
    both ways (the privacy profile of two Gaussians, e.g. Steinke 2022, "Composition of Differential Privacy
    & Privacy Amplification by Subsampling"): 0 when they already are at ε = 0, inf when one of them is
    a point mass and they differ. Equal stds give ``gdp_epsilon(|in_mean − out_mean| / std, delta)``."""
    if min(out_std, in_std) <= 0:
        return 0.0 if (out_mean, out_std) == (in_mean, in_std) else math.inf
    log_delta = math.log(delta)

    def log_excess(eps: float) -> float:  # non-increasing in ε
        return max(_log_hockey_stick(eps, in_mean, in_std, out_mean, out_std),
                   _log_hockey_stick(eps, out_mean, out_std, in_mean, in_std)) - log_delta

    if log_excess(0.0) <= 0:
        return 0.0
    high = 1.0
    while log_excess(high) > 0:
        high *= 2
    return brentq(log_excess, high / 2 if high > 1 else 0.0, high)


def _mu(inserted: np.ndarray, held_out: np.ndarray) -> float:
    shift, spread = float(inserted.mean() - held_out.mean()), float(held_out.std(ddof=1))
    if spread == 0:  # a bootstrap resample of a few held-out canaries can repeat one value
        return math.inf if shift > 0 else 0.0
    return shift / spread


def _epsilon(observe: Observe, inserted: np.ndarray, held_out: np.ndarray, delta: float) -> float:
    """final: μ-GDP with μ = (mean_in − mean_out) / std_out; all-iterates: the two fitted Gaussians."""
    if observe == "final":
        return gdp_epsilon(_mu(inserted, held_out), delta)
    return gaussians_epsilon(
        float(held_out.mean()), float(held_out.std(ddof=1)), float(inserted.mean()), float(inserted.std(ddof=1)),
        delta,
    )


def estimate(
    inserted: np.ndarray,
    held_out: np.ndarray,
    delta: float,
    *,
    seed: int = 0,
    resamples: int = 200,
    observe: Observe = "final",
) -> tuple[float, float, tuple[float, float]]:
    """μ = (mean_in − mean_out) / std_out, the ε at ``delta`` of ``observe``'s estimator, and the 95%
    percentile interval of ε over ``resamples`` bootstrap resamples of the inserted and held-out canaries."""
    rng = numpy_generator(seed, "audit_bootstrap")
    boot = [
        _epsilon(observe, rng.choice(inserted, inserted.size), rng.choice(held_out, held_out.size), delta)
        for _ in range(resamples)
    ]
    low, high = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")  # order statistics: ε may be inf
    return _mu(inserted, held_out), _epsilon(observe, inserted, held_out, delta), (float(low), float(high))


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
    observe: str
    """"final": the statistic is cos(θ_T − θ_0, c_i); "all-iterates": max over rounds t of
    cos(θ_{t+1} − θ_t, c_i) (the cosine fields below are then those of these maxima)."""
    inserted_cosine_mean: float
    inserted_cosine_std: float
    held_out_cosine_mean: float
    held_out_cosine_std: float
    verdict: str


def check_options(canaries: int, noise_scales: Sequence[float], observe: str = "final") -> None:
    """Raise ValueError for fewer than 4 canaries, a noise scale that is not a positive number or an
    unknown ``observe``."""
    if observe not in OBSERVE:
        raise ValueError(f"observe must be one of {', '.join(OBSERVE)}, got {observe!r}")
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
    accountant.compose(experiment.planned_event)
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
    ax.set_xlabel("cos(θ_T − θ_0, canary direction)" if audit.observe == "final"
                  else "max over rounds t of cos(θ_t+1 − θ_t, canary direction)")
    ax.set_ylabel("canaries")
    low, high = audit.interval
    ax.set_title(f"{audit.observe}, noise ×{audit.noise_scale:g}: μ = {audit.mu:.3g}, "
                 f"empirical ε = {audit.empirical_epsilon:.3g} "
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
    observe: Observe = "final",
) -> AuditResult:
    """Train ``config`` with ``canaries`` canary users and noise multiplier z·``noise_scale`` in
    ``<out_dir or output_dir>/<name>_audit_x<scale>_k<canaries>_s<seed>/`` (resumed like any run; ``fresh``
    starts over), then estimate ε against an attacker who sees the final model (``observe="final"``:
    ``audit.json``, ``cosines.png``) or every round's model (``"all-iterates"``: ``audit_all_iterates.json``,
    ``cosines_all_iterates.png``; the per-round cosines are recorded during training, so a run trained by a
    final-model audit cannot be re-read this way and is refused: use ``fresh``)."""
    check_options(canaries, [noise_scale], observe)
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
    recorder = RoundCosines(users, run_dir.root / ROUND_COSINES) if observe == "all-iterates" else None
    result = run_in_process(
        experiment, run_dir, fresh=fresh, on_round=on_round, extra_updates=users.updates, on_model=recorder
    )
    if recorder is None:
        statistic = users.cosines(_flat(result.params) - _flat(initial))
    else:
        statistic = recorder.maxima(result.rounds_done)
    inserted, held_out = statistic[: users.inserted], statistic[users.inserted :]
    mu, empirical, interval = estimate(inserted, held_out, result.delta, seed=seed, observe=observe)
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
        dimension=users.dimension,
        observe=observe,
        inserted_cosine_mean=float(inserted.mean()),
        inserted_cosine_std=float(inserted.std(ddof=1)),
        held_out_cosine_mean=float(held_out.mean()),
        held_out_cosine_std=float(held_out.std(ddof=1)),
        verdict="consistent" if interval[0] <= claimed else VIOLATION,
    )
    json_name, plot_name = output_names(observe)
    write_json_atomic(run_dir.root / json_name, {**asdict(audit), "run_dir": str(run_dir.root)})
    write_cosine_plot(run_dir.root / plot_name, inserted, held_out, audit)
    return audit
