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
μ = (mean_in − mean_out) / std_out; read as μ-GDP, that is (ε, δ)-DP at the run's δ, with a 95% interval from
bootstrapping the canaries (:func:`fedpub.privacy.empirical.estimate`, where the maths of both estimators is).

All iterates (the paper's threat model where every model delta is released, as fedpub's global model is
to every sampled user each round): a canary's statistic is max_t cos(θ_{t+1} − θ_t, c_i), the largest
cosine of c_i with any round's model delta, as in the authors' code (google-research/federated,
``one_shot_epe/fed_avg_with_canaries.py`` keeps running maxima of the cosines of each round's model delta
with the inserted and with separate held-out canaries). The held-out maxima (of T cosines ≈ N(0, 1/d)) are
not Gaussian, but a Gaussian is still fitted to each sample, its own mean and std, and ε is the exact ε of
the two, N(mean_out, std_out²) vs N(mean_in, std_in²) (:func:`fedpub.privacy.empirical.gaussians_epsilon`):
the inserted maxima, a mixture over how often each canary joined, are wider than the held-out ones, which
this fit counts and the final variant's equal-std μ-GDP would not. (Read from the authors' code; the text
of the paper's all-iterates algorithm was not at hand.) A round's k cosines are one matrix-vector product
(the k × d canary matrix is kept in memory up to :data:`MATRIX_BYTES`), appended to :data:`ROUND_COSINES`
in the run directory, so a resumed audit keeps those of the rounds its checkpoint covers.

The audited claim is the accountant's ε of the configured run, for its population N: the canaries are not
users of the accountant (they only join the cohort). ``noise_scale`` breaks the mechanism on purpose: the
run adds noise z·noise_scale while the claim stays the ε of z.

Each audit also says what its size can detect (:mod:`fedpub.simulations.tools.audit_power`), from the configuration
(canaries, rounds, z, q, d, the claimed ε, δ), never from what this run's canaries showed: the smallest noise error
(a run adding z/k) it flags with 95 % power, its power against the run's own planted error, and how many canaries,
over the same rounds, flag a run adding half its noise (:data:`DOUBLE_ERROR`) with 95 % power, with an estimate of
that audit's run time from this one's: the time per round of the rounds it trained, its canaries' own work (their
updates and cosines) scaled with their number.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar, get_args

import matplotlib
import numpy as np
import torch

from fedpub.atomic import atomic_path, write_json_atomic
from fedpub.config import ExperimentConfig, parse_config
from fedpub.models.seeded import model_params
from fedpub.privacy.empirical import Observe, estimate
from fedpub.seeding import numpy_generator, torch_generator
from fedpub.types import Params, Updates
from fedpub.simulations.tools.audit_power import (
    LARGEST_ERROR, MOST_CANARIES, AuditSize, canaries_to_detect, model_epsilon, power, smallest_error,
)
from fedpub.simulations.tools.compare import deep_merge
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import Experiment, build_experiment
from fedpub.simulations.run.run_dir import RunDirectory

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CANARY_NORM = 10.0
"""A canary's update norm in clip norms: clipping scales it to exactly C."""
VIOLATION = "VIOLATION: empirical ε exceeds the accountant's"
OBSERVE: tuple[str, ...] = get_args(Observe)
MATRIX_BYTES = 1 << 30
"""The canary directions are kept as one k × d float64 matrix up to this size, else drawn again at each use."""
ROUND_COSINES = "canary_round_cosines.f64"
"""In an all-iterates audit's run directory: per round, its index and its k cosines (float64)."""
_R = TypeVar("_R")
DOUBLE_ERROR = 2.0
"""The noise error each audit offers a size for: a run adding half the noise it claims."""


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
    """``on_model`` hook of :func:`~fedpub.simulations.run.engine.run_in_process`: appends round t's cosines
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
    detectable_noise_error: float
    """The smallest k such that an audit of this size (canaries, rounds) flags a run adding noise z/k with 95 %
    power, from the configuration alone (:mod:`~fedpub.simulations.tools.audit_power`; inf: none up to a
    thousand). Never read off this run's canaries."""
    power_against_run: float | None
    """The probability that an audit of this size flags this run's own noise error 1/noise_scale (None for a
    noise scale of 1 or more: no error was planted)."""
    model_epsilon: float
    """The ε the estimator tends to, with ever more canaries, on this run's noise if the canaries are as visible
    as the model of :mod:`~fedpub.simulations.tools.audit_power` says (their best case)."""
    canaries_for_double_error: int | None
    """The canaries, over the same rounds, that flag a run adding noise z/2 with 95 % power, from the configuration
    alone; None: none up to a million."""
    seconds: float | None
    """This run's training time, all rounds (None: nothing was trained, the run directory held it finished)."""
    seconds_for_double_error: float | None
    """The estimated training time of the audit with ``canaries_for_double_error`` canaries."""


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


class _Clock:
    """The wall time of a run's rounds and, within it, of its canaries' own work (their updates and cosines)."""

    def __init__(self) -> None:
        self.rounds, self.total, self.canaries = 0, 0.0, 0.0
        self._last = time.perf_counter()

    def counted(self, on_round: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None]:
        """``on_round``, also adding the time since the last round ended (or since the clock started)."""

        def hook(record: dict[str, Any]) -> None:
            now = time.perf_counter()
            self.rounds, self.total, self._last = self.rounds + 1, self.total + now - self._last, now
            if on_round is not None:
                on_round(record)

        return hook

    def timed(self, work: Callable[..., _R]) -> Callable[..., _R]:
        """``work``, its time added to the canaries'."""

        def call(*args: Any, **kwargs: Any) -> _R:
            start = time.perf_counter()
            try:
                return work(*args, **kwargs)
            finally:
                self.canaries += time.perf_counter() - start

        return call

    def scaled(self, rounds: int, canary_factor: float) -> float:
        """The time of ``rounds`` rounds at this clock's time per round, the canaries' share times
        ``canary_factor``."""
        return rounds / self.rounds * (self.total - self.canaries + canary_factor * self.canaries)


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
    clock = _Clock()
    result = run_in_process(
        experiment, run_dir, fresh=fresh, on_round=clock.counted(on_round), extra_updates=clock.timed(users.updates),
        on_model=None if recorder is None else clock.timed(recorder),
    )
    if recorder is None:
        statistic = users.cosines(_flat(result.params) - _flat(initial))
    else:
        statistic = recorder.maxima(result.rounds_done)
    inserted, held_out = statistic[: users.inserted], statistic[users.inserted :]
    mu, empirical, interval = estimate(inserted, held_out, result.delta, seed=seed, observe=observe)
    size = AuditSize(users.inserted, canaries - users.inserted, config.rounds, users.rate, z, users.dimension, claimed,
                     result.delta, observe)
    needed = canaries_to_detect(size, DOUBLE_ERROR)
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
        detectable_noise_error=smallest_error(size),
        power_against_run=power(size, 1 / noise_scale) if noise_scale < 1 else None,
        model_epsilon=model_epsilon(size, 1 / noise_scale),
        canaries_for_double_error=needed,
        seconds=clock.scaled(result.rounds_done, 1.0) if clock.rounds else None,
        seconds_for_double_error=(
            clock.scaled(result.rounds_done, needed / canaries) if clock.rounds and needed is not None else None
        ),
    )
    json_name, plot_name = output_names(observe)
    write_json_atomic(run_dir.root / json_name, {**asdict(audit), "run_dir": str(run_dir.root)})
    write_cosine_plot(run_dir.root / plot_name, inserted, held_out, audit)
    return audit


def audit_power_line(audit: AuditResult) -> str:
    """What ``audit``'s size detects with 95 % power (from its configuration, not from what its canaries showed), its
    power against this run's own planted error, and the size that detects a run adding half its noise."""
    k, needed, size = audit.detectable_noise_error, audit.canaries_for_double_error, _size(audit.canaries, audit)
    line = (f"{size} flag no noise error up to z/{LARGEST_ERROR:g} with 95 % power" if math.isinf(k)
            else f"{size} flag a run adding noise z/{_rounded_up(k)} or less with 95 % power")
    if audit.power_against_run is not None:
        line += f"; this run's z/{1 / audit.noise_scale:.3g} with {audit.power_against_run:.0%}"
    if needed is None:
        line += f"; no count up to {MOST_CANARIES:,} canaries flags z/2 in {audit.rounds} rounds"
    elif audit.seconds_for_double_error is None or audit.seconds is None:
        line += f"; z/2 needs {_size(needed, audit)}"
    else:
        line += (f"; z/2 needs {_size(needed, audit)}, about {_duration(audit.seconds_for_double_error)} of training "
                 f"(this audit's: {_duration(audit.seconds)})")
    if audit.interval[1] < audit.model_epsilon:
        line += (f". This run's canaries stood out less than the power model assumes (empirical ε at most "
                 f"{audit.interval[1]:.3g}, model {audit.model_epsilon:.3g}): these figures are optimistic for it")
    return line


def _size(canaries: int, audit: AuditResult) -> str:
    return f"{canaries:,} canaries over {audit.rounds} rounds"


def _rounded_up(k: float) -> str:
    """``k`` to 3 significant digits, rounded up (a larger k is a weaker claim)."""
    unit = 10.0 ** (math.floor(math.log10(k)) - 2)
    return f"{math.ceil(k / unit - 1e-9) * unit:.3g}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
