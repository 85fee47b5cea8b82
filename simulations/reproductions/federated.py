"""The one runner of the federated reproductions (fedpub issue 21): tune on validation users, run the test sweep,
judge the paper's claims, write ``comparison.md`` and ``claims.json``.

A reproduction module declares a :class:`FederatedReproduction` (its sweep file, the paper's claims with the
paper's own figure for each, its tuning axes) and its ``main(argv)`` calls :func:`run`, which

1. places the sweep: its base config with the reproduction's ``changes`` merged in (``--quick``: its tiny
   ``quick`` sizes too, the data under ``--out``, a fixed noise multiplier (:data:`QUICK_NOISE`) in place of the
   ε values, the first tuning axis cut to its first two values and the others to their first, one tuning seed,
   never extended: a check that the pipeline and its gates run, its verdicts say nothing about the paper);
2. tunes every strategy **fairly** (fedpub issues 36 and 45): each tunes the client lr and what scales the noise
   against the signal (the server lr or the clip norm), over grids of one size (an equal budget;
   :class:`FederatedReproduction` refuses otherwise); the strategies that tune the same axes and that a claim
   compares (directly or through another such arm) tune **jointly** on one union grid (:func:`~.tuning.tune_jointly`:
   an edge extended for one is extended for all, so no arm of a claim ends on a grid of its own; arms no claim
   compares tune apart even where their axes share a name, as DP-FedAdam's Adam rate and DP-FedAvg's server lr),
   extended past an edge at most :attr:`~FederatedReproduction.max_extensions` times, at every
   ε of the sweep (each ε's test runs take its own values), each grid point scored as the mean over the
   :attr:`~FederatedReproduction.tuning_seeds` (three, outside the test seeds) of the validation users' headline metric
   (``val_accuracy``: the base must hold ``data.validation``), never the test users; these runs are the tuning
   budget, reported and not counted in ε, and their scores the landscapes the :class:`~.judge.NotFlat` gate
   reads; with ``--jobs N`` each grid's runs go N at a time (every strategy's and ε's initial grid together,
   then the new points of each round of extensions);
   a control that :attr:`~FederatedReproduction.follows` an arm runs at that arm's tuned values instead;
3. runs every (strategy, ε, seed) with the chosen values (``out/runs/``; a rerun resumes: a finished run is not
   run again), every arm of one (ε, seed) on the same cohorts and noise, and for each claim whose arms tune the
   same axes the better arm at the other's values too (``<better>@<worse>``: the claim judged at a shared point,
   fedpub issue 45), and writes the comparison (``compare.csv``, ``compare.md``, the two plots);
4. judges the claims by :mod:`fedpub.simulations.reproductions.judge`, the reproduction's
   :attr:`~FederatedReproduction.gates` checked in every cell first on the validation users' scores, never on the
   test outcomes they guard (a control's rows, run once, in the judge's ``ANY`` cell), and each claim's own
   :class:`~.judge.PrivateStepOn` gate (a tuned server lr at its grid's low edge, or a warm arm less than
   :data:`BEATS_MARGIN` past its round 0, :mod:`.round_zero`: private training switched off), and writes
   ``comparison.md`` and ``claims.json``
   (:mod:`fedpub.simulations.reproductions.results_record`) for the results page.

The sweep file has the keys of a ``fedpub compare`` sweep (``base``, ``epsilons``, ``seeds``, ``strategies``);
without ``epsilons`` every run keeps the base's fixed noise multiplier, and the claims are judged in one cell, at the
largest ε a run achieved (runs whose users differ achieve different ε at one noise multiplier).
The sweep as run (tuned values included) is written to ``out/sweep.yaml``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from fedpub.atomic import write_json_atomic, write_text_atomic
from fedpub.config import ExperimentConfig, dump_config, parse_config
from fedpub.strict_yaml import load_yaml
from fedpub.simulations.tools.compare import deep_merge
from fedpub.simulations.tools.compare_report import (
    EPSILON_PLOT,
    ROUND_PLOT,
    TABLE_FILE,
    ComparedRun,
    read_run,
    run_name,
    write_comparison,
)
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.reproductions.claims import cell_of, judge_claims, results_of
from fedpub.simulations.reproductions.judge import RULE, Beats, Claim, Gate, NotDegenerate, NotFlat, PrivateStepOn
from fedpub.simulations.reproductions.results_record import (
    ClaimRecord,
    ReproductionRecord,
    default_out,
    read_claims_json,
    write_claims_json,
)
from fedpub.simulations.reproductions.round_zero import start_of, warm_start_metrics
from fedpub.simulations.reproductions.row_cache import KEPT_FOLDER, RowCache
from fedpub.simulations.reproductions.stopping import check as check_stop
from fedpub.simulations.reproductions.stopping import stops_between_steps
from fedpub.simulations.reproductions.tuning import (
    Axis,
    Tuning,
    at_point,
    grid_points,
    low_edges,
    split_point,
    tune_jointly,
)
from fedpub.simulations.run.run_dir import RunDirectory
from fedpub.simulations.run.session import RunInterrupted, run_changes
from fedpub.simulations.tools.sweep_jobs import JobOutcome, parse_jobs, resolve_jobs, run_jobs

TUNING_SEED = 100
"""The first tuning seed, outside the test seeds."""
TUNING_SEEDS = (TUNING_SEED, TUNING_SEED + 1, TUNING_SEED + 2)
"""Three tuning seeds a grid point, disjoint from the test seeds (issue 45: a point chosen on one seed's draw is
that draw's, e.g. AdaDPS's DP-FedAvg at 0.816 on its tuning seed and 0.528 on the test seeds)."""
NOISE_SCALES = ("strategy.server_optimizer.lr", "strategy.clip_norm")
"""What scales the noise against the signal: every tuned arm tunes one of them beside the client lr."""
QUICK_EMNIST: dict[str, Any] = {
    "rounds": 2, "eval_every": 2, "checkpoint_every": 2,
    "data": {"synthetic": {"num_writers": 40, "min_examples": 6, "max_examples": 10}, "eval_clients": 8},
    "client": {"epochs": 1}, "strategy": {"sampling": {"clients_per_round": 5}},
}
"""``--quick`` on the EMNIST-layout data: 40 writers, 2 rounds, 5 users a round. Merged over the base and over
every strategy's overrides (a strategy's own ``rounds`` included)."""
QUICK_NOISE: dict[str, Any] = {"strategy": {"noise_multiplier": 1.0, "target_epsilon": None}}
"""``--quick`` runs at a fixed noise multiplier: no calibration (on 2 loaded cores a calibration took 3-35 s, more
than a tiny run's training)."""

CLIENT_LR = Axis("client.lr", (0.03, 0.1, 0.3))
"""The client learning-rate grid the federated reproductions start from (extended by :func:`tune` at an edge)."""
SERVER_LR = Axis("strategy.server_optimizer.lr", (0.3, 1.0, 3.0))
"""The server learning-rate grid (SGD with the base's momentum): it scales the noise with the signal, unlike the
client lr, which scales the signal alone (fedpub issue 36)."""
EMNIST_CHANCE = 0.1
"""The EMNIST-layout digits' trivial predictor (10 classes): an arm within :data:`CHANCE_MARGIN` of it learned
nothing (DP-FedAvg cold at ε = 0.5 scored 0.1002)."""
CHANCE_MARGIN = 0.05
FLAT = 0.01
"""A tuning landscape whose validation scores span less than this is flat (the :class:`~.judge.NotFlat` gate)."""
BEATS_MARGIN = 0.01
"""By how much the best private arm must beat public-only (or the trivial predictor) for a cell to be testable,
and a warm-started arm its own round 0."""
PRIVATE_STEP = SERVER_LR.name
"""The axis that sizes the private step (it scales signal and noise alike): tuned to its grid's low edge, private
training was switched off (:func:`_private_step_gated`)."""


def emnist_gates(arms: tuple[str, ...], private: tuple[str, ...] = ()) -> tuple[Gate, ...]:
    """The regime gates of a reproduction on the EMNIST-layout data: the best of ``private`` (none: no public-data
    claim) beats the ``public_only`` control by :data:`BEATS_MARGIN`, no arm within :data:`CHANCE_MARGIN` of
    chance, no tuning landscape flatter than :data:`FLAT`."""
    public = (Beats(private, "public_only", BEATS_MARGIN, "public-only"),) if private else ()
    return (*public, NotDegenerate(arms, EMNIST_CHANCE, CHANCE_MARGIN), NotFlat(arms, FLAT))

EVALUATION: dict[str, Any] = {"data": {"validation": {"fraction": 0.1, "seed": 0}, "eval_users": "all"}}
"""Who evaluates: the validation users the tuning scores on (10 % of the private users, held out of N, never
trained on), and every test client for the claims (``eval_users: all``: by default a run with public users is
evaluated on the public users' test examples only: a few hundred examples, of the very users that
post-training fits)."""

GATE_SIZE_EMNIST: dict[str, Any] = deep_merge(EVALUATION, {
    "rounds": 150, "eval_every": 50, "checkpoint_every": 50,
    "model": {"name": "emnist_softmax"},
    "client": {"epochs": 1},
    "data": {"path": "data/synthetic_emnist_5000", "synthetic": {"num_writers": 5000}, "eval_clients": 1000},
    "strategy": {"sampling": {"clients_per_round": 500}},
})
"""The sweeps' base (``public_emnist.yaml``) changed to the sizes at which the regime probe of fedpub issue 36
(:mod:`.emnist_regime`, ``simulations/configs/public_emnist_gate.yaml``) found the gate passing: the softmax
``emnist_softmax`` (d = 7,850), 5,000 writers (``data/synthetic_emnist_5000``, generated on first use, about a
minute and 245 MB; shared by the reproductions at this size, whose public users are a fraction of them), 500
private users expected a round (Poisson), 150 rounds of one local epoch, evaluated on the first 1,000 test clients
by id (:data:`EVALUATION`; three evaluations, ``eval_every: 50``, cost a few seconds of a run's minute)."""

GATE_SIZE_60_ROUNDS: dict[str, Any] = deep_merge(GATE_SIZE_EMNIST, {"eval_every": 20, "checkpoint_every": 20})
""":data:`GATE_SIZE_EMNIST` for sweeps of 60 rounds (seed 001's reproductions, the paper's 60 epochs; their sweep
files set the rounds), evaluated and checkpointed every 20 rounds."""

GATE_SIZE_RATES = (Axis(CLIENT_LR.name, (0.03, 0.1)), Axis(SERVER_LR.name, (0.3, 1.0)))
"""A 2 × 2 grid of client lr × server lr at :data:`GATE_SIZE_EMNIST`, reaching down from the gate probe's 0.1 / 1.0
(DOPE's probe runs that chose it: :mod:`.dope_table7`); extended once it is 3 × 3 (DOPE's DP-FedAvg arms chose
0.03 / 1.0 inside it)."""

Row = dict[str, Any]
Control = Callable[[Mapping[str, Any], Sequence[int], bool, RowCache], tuple[list[Row], str]]
"""(the placed base config, the test seeds, quick, where rows computed earlier are kept) ↦ one row per seed of a
method run outside the sweep, once for every ε (its metrics, ``eval_*`` and ``val_*``, with ``strategy``, ``seed``
and ``target_epsilon`` None) and its tuning paragraph."""
Setting = Callable[[Sequence[Row], Mapping[str, Any]], str]
"""(the test rows, the placed base config) ↦ a paragraph on the regime the runs were in, for ``comparison.md``."""


@dataclass(frozen=True)
class FederatedReproduction:
    """A paper's claims checked on a sweep of fedpub runs, its strategies tuned on validation users."""

    name: str
    seed_paper: str
    title: str
    paper: str
    sweep: Path
    claims: tuple[Claim, ...]
    """Each with the paper's own figure for it (shown beside ours on the results page)."""
    axes: Mapping[str, tuple[Axis, ...]] = field(default_factory=dict)
    """Per strategy label, its tuning grid; an axis's name is the dotted config key it sets (``client.lr``).
    Every grid has the same number of points (an equal budget) and one of :data:`NOISE_SCALES`."""
    gates: tuple[Gate, ...] = ()
    """The regime gates checked in every cell before a claim is judged there (:mod:`.judge`)."""
    tuning_seeds: tuple[int, ...] = TUNING_SEEDS
    """The seeds each tuning point runs with (its score: their mean); outside the test seeds."""
    max_extensions: int = 2
    """How many times a full mode's tuning may extend a grid past an edge (:func:`~.tuning.tune`; quick: never).
    Each extension costs a grid's worth of new points (a 2 × 2 grid's best is always on an edge: one extension
    makes it 3 × 3, five new points), so a reproduction whose runs are long bounds its budget here."""
    changes: Mapping[str, Any] = field(default_factory=dict)
    """Merged into the sweep's base (the regime, the validation users)."""
    quick: Mapping[str, Any] = field(default_factory=lambda: QUICK_EMNIST)
    """Merged into the base and over every strategy's overrides in ``--quick`` mode (``data.path`` is set to
    ``--out``'s ``data`` folder; a strategy with a ``data.path`` of its own gets ``data_<that folder's name>``)."""
    note: str = ""
    control: Control | None = None
    setting: Setting | None = None
    follows: Mapping[str, str] = field(default_factory=dict)
    """Controls run at another strategy's tuned values and not tuned themselves ({control: the strategy it follows}),
    so the two differ in the control's one change alone (fedpub issue 45, item 4: AdaDPS's shuffled A at the
    token-frequency arm's tuned strength p, not at a p of its own)."""

    def __post_init__(self) -> None:
        labels = set(self.strategies)
        if unknown := sorted(set(self.axes) - labels):
            raise ValueError(f"{self.name}: axes name strategies {unknown} the sweep does not run; it runs "
                             f"{sorted(labels)}")
        if self.axes and not load_yaml(self.base_text())["data"].get("validation") \
                and "validation" not in self.changes.get("data", {}):
            raise ValueError(f"{self.name}: tuning needs validation users: set data.validation in the base or "
                             "in changes")
        if bad := sorted(c for c, owner in self.follows.items() if c not in labels or c in self.axes
                         or owner not in self.axes):
            raise ValueError(f"{self.name}: follows names {bad}: a control must be a strategy of the sweep with no "
                             "axes of its own, following a tuned strategy")
        if untuned := sorted(labels - set(self.axes) - set(self.follows)):
            raise ValueError(f"{self.name}: every strategy is tuned (issue 36: equal budgets); {untuned} have no axes "
                             "(a control run at another's tuned values: follows)")
        budgets = {label: len(grid_points(axes)) for label, axes in self.axes.items()}
        if len(set(budgets.values())) > 1:
            raise ValueError(f"{self.name}: the tuning grids must be of one size (an equal budget), got {budgets}")
        if noisy := sorted(label for label, axes in self.axes.items()
                           if not {a.name for a in axes} & set(NOISE_SCALES)):
            raise ValueError(f"{self.name}: {noisy} tune none of {NOISE_SCALES} (what scales the noise)")
        if set(self.tuning_seeds) & set(self.raw["seeds"]):
            raise ValueError(f"{self.name}: tuning_seeds {self.tuning_seeds} overlap the test seeds "
                             f"{self.raw['seeds']}")
        if self.max_extensions < 0:
            raise ValueError(f"{self.name}: max_extensions must be ≥ 0 (0: never extend a grid), got "
                             f"{self.max_extensions}")

    @property
    def raw(self) -> dict[str, Any]:
        """The sweep file's mapping."""
        return load_yaml(self.sweep.read_text(encoding="utf-8"))

    @property
    def strategies(self) -> dict[str, dict[str, Any]]:
        return {label: overrides or {} for label, overrides in self.raw["strategies"].items()}

    def base_text(self) -> str:
        return (self.sweep.parent / self.raw["base"]).read_text(encoding="utf-8")


@dataclass(frozen=True)
class PlacedSweep:
    """What :func:`run` runs: the base config, the strategies' overrides, the ε values (None: the base's fixed
    noise multiplier), the test seeds, the tuning axes (cut in quick mode), the extensions allowed past an edge,
    the tuning seeds and the controls that follow another strategy's tuned values."""

    base: dict[str, Any]
    strategies: dict[str, dict[str, Any]]
    epsilons: tuple[float, ...] | None
    seeds: tuple[int, ...]
    axes: dict[str, tuple[Axis, ...]]
    max_extensions: int
    tuning_seeds: tuple[int, ...] = (TUNING_SEED,)
    follows: Mapping[str, str] = field(default_factory=dict)
    compared: tuple[tuple[str, str], ...] = ()
    """The pairs of strategies a claim compares (better, worse): those that tune the same axes tune jointly."""

    @property
    def tuning_epsilons(self) -> tuple[float | None, ...]:
        """The ε values tuned at: every ε (None: the base's fixed noise multiplier)."""
        return self.epsilons or (None,)


def place(repro: FederatedReproduction, out: Path, quick: bool, seeds: int | None = None) -> PlacedSweep:
    """The sweep as it runs into ``out`` (full, or quick: see the module docstring); ``seeds``: test seeds 0 to
    ``seeds`` − 1 instead of the sweep file's."""
    raw = repro.raw
    test_seeds = tuple(raw["seeds"]) if seeds is None else tuple(range(seeds))
    base = deep_merge(load_yaml(repro.base_text()), dict(repro.changes))
    epsilons = tuple(float(e) for e in raw["epsilons"]) if "epsilons" in raw else None
    strategies, axes = repro.strategies, {label: tuple(axes) for label, axes in repro.axes.items()}
    if quick:
        tiny = deep_merge(deep_merge(dict(repro.quick), QUICK_NOISE), {"data": {"path": str(out / "data")}})
        base = deep_merge(base, tiny)
        strategies = {label: deep_merge(overrides, _quick_data(tiny, overrides, out))
                      for label, overrides in strategies.items()}
        epsilons = None
        axes = {label: tuple(Axis(a.name, a.values[:2 if i == 0 else 1], a.scale) for i, a in enumerate(grid))
                for label, grid in axes.items()}
    return PlacedSweep(base, strategies, epsilons, test_seeds, axes, 0 if quick else repro.max_extensions,
                       tuple(repro.tuning_seeds)[:1] if quick else tuple(repro.tuning_seeds), dict(repro.follows),
                       tuple((claim.better, claim.worse) for claim in repro.claims))


def _quick_data(tiny: Mapping[str, Any], overrides: Mapping[str, Any], out: Path) -> dict[str, Any]:
    """The quick sizes for a strategy: a strategy with data of its own (its ``data.path``) keeps it apart, in
    ``out/data_<its folder's name>``, the others share ``out/data``."""
    own = overrides.get("data", {}).get("path")
    if own is None:
        return dict(tiny)
    return deep_merge(dict(tiny), {"data": {"path": str(out / f"data_{Path(own).name}")}})


def _nested(dotted: str, value: float) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    nested: Any = value
    for part in reversed(dotted.split(".")):
        nested = {part: nested}
    return nested


def _with_values(overrides: Mapping[str, Any], values: Mapping[str, float]) -> dict[str, Any]:
    """A strategy's overrides with tuned values (dotted config keys) merged in."""
    merged = dict(overrides)
    for key, value in values.items():
        merged = deep_merge(merged, _nested(key, value))
    return merged


@dataclass(frozen=True)
class RunSpec:
    """One run of the base with a strategy's ``overrides``, at target ``epsilon`` (None: the base's noise
    multiplier), in ``out/name``; the runs of one (ε, seed) share their privacy draws (:attr:`draws_key`)."""

    overrides: Mapping[str, Any]
    epsilon: float | None
    seed: int
    name: str
    out: Path
    label: str | None = None
    """The row's strategy (None: the ``<label>`` of the name; a shared-point run's is ``<better>@<worse>``)."""

    def config(self, base: Mapping[str, Any]) -> ExperimentConfig:
        merged = deep_merge(dict(base), dict(self.overrides))
        if self.epsilon is not None:
            merged["strategy"] = {**merged.get("strategy", {}), "target_epsilon": self.epsilon,
                                  "noise_multiplier": None}
        privacy = {**merged.get("privacy", {}), "draws_key": self.draws_key}
        return parse_config({**merged, "seed": self.seed, "name": self.name, "output_dir": str(self.out),
                             "privacy": privacy}, f"{self.name} seed {self.seed}")

    @property
    def draws_key(self) -> str:
        """The arms at one ε and seed share their cohorts and noise draws (common random numbers, issue 45)."""
        return f"arms__eps{self.epsilon:g}__seed{self.seed}" if self.epsilon is not None else f"arms__seed{self.seed}"


def run_one(base: Mapping[str, Any], spec: RunSpec) -> ComparedRun:
    """The run ``spec`` (resumed if checkpointed, not rerun if finished), read back as the comparison reads it. A run
    its directory holds finished with this very config is read from its files alone: building its experiment (data,
    calibration) and restoring its session (checkpoint, accountant) would cost seconds a run and change nothing. A
    Ctrl-C received since the last step stops here, before it (:mod:`.stopping`)."""
    check_stop()
    config = spec.config(base)
    run_dir = RunDirectory(config.output_dir / config.name)
    label = spec.label or spec.name.split("__")[0]
    stored = run_dir.stored_config()
    if stored is not None and run_dir.holds_finished_run() and not run_changes(stored, dump_config(config)):
        return read_run(run_dir, label)
    result = run_in_process(build_experiment(config), run_dir)
    return read_run(run_dir, label, result.final_metrics)


class RunsDidNotFinish(RuntimeError):
    """Runs that :func:`run_ahead` handed to workers failed or were stopped."""


def run_ahead(base: Mapping[str, Any], specs: Sequence[RunSpec], jobs: int) -> None:
    """With ``jobs`` > 1 (or ``auto``: one per core), run ``specs`` that many at once in worker processes
    (``fedpub compare --jobs``'s :func:`~fedpub.simulations.tools.sweep_jobs.run_jobs`), so that :func:`run_one` then
    finds them finished; a failed run is an error naming it. With one job, nothing: :func:`run_one` runs each in
    turn."""
    jobs = resolve_jobs(jobs, len(specs))
    if jobs <= 1:
        return
    failed: list[str] = []

    def ended(outcome: JobOutcome) -> None:
        spec = specs[outcome.index]
        print(f"{spec.name} seed {spec.seed}: {outcome.status} in {outcome.seconds:.0f} s", flush=True)
        if outcome.status != "finished":  # a stopped run has no error to name
            why = " ".join(part for part in (outcome.error_kind, outcome.error) if part)
            failed.append(f"{spec.name} seed {spec.seed} ({outcome.status}{': ' + why if why else ''})")

    stopped = run_jobs([spec.config(base) for spec in specs], jobs, started=lambda index: None, ended=ended)
    if stopped or failed:
        raise RunsDidNotFinish("runs did not finish: " + "; ".join(failed or ["stopped by a signal"]))


TuningKey = tuple[str, float | None]
"""(strategy label, the ε tuned at; None: the base's fixed noise multiplier)."""


def _tuning_spec(placed: PlacedSweep, out: Path, label: str, epsilon: float | None,
                 point: Mapping[str, float], seed: int) -> RunSpec:
    """The tuning run of ``label`` at ``point`` with ``seed``: ``label[__eps<ε>]__<key><value>...__seed<seed>`` (no
    ε at a fixed noise multiplier), in ``out/tuning``."""
    name = label + (f"__eps{epsilon:g}" if epsilon is not None else "") + "".join(
        f"__{key.replace('.', '-')}{value:g}" for key, value in point.items()) + f"__seed{seed}"
    return RunSpec(_with_values(placed.strategies[label], point), epsilon, seed, name, out / "tuning")


def _same_axes(placed: PlacedSweep, a: str, b: str) -> bool:
    """Whether strategies ``a`` and ``b`` both tune, and tune axes of the same names in the same order: a claim
    between two such arms tunes them jointly (:func:`_joint_groups`) and is judged at a shared point too
    (:func:`_shared_point_claims`)."""
    return a in placed.axes and b in placed.axes and \
        [x.name for x in placed.axes[a]] == [x.name for x in placed.axes[b]]


def _joint_groups(placed: PlacedSweep) -> list[tuple[tuple[str, ...], list[Axis]]]:
    """The strategies that tune jointly, each group with its union grid (every value any of them starts from, per
    axis): those that tune the same axes (by name) and that a claim compares, directly or through another such
    strategy (:attr:`PlacedSweep.compared`); every other strategy is a group of its own."""
    group_of = {label: (label,) for label in placed.axes}
    for a, b in placed.compared:
        if _same_axes(placed, a, b) and group_of[a] != group_of[b]:
            merged = tuple(label for label in placed.axes if label in group_of[a] + group_of[b])
            group_of.update(dict.fromkeys(merged, merged))
    groups = []
    for labels in dict.fromkeys(group_of.values()):
        first = placed.axes[labels[0]]
        union = [Axis(axis.name, tuple(sorted({v for label in labels for v in placed.axes[label][i].values})),
                      axis.scale) for i, axis in enumerate(first)]
        groups.append((labels, union))
    return groups


def _tune(placed: PlacedSweep, out: Path, jobs: int = 1) -> dict[TuningKey, Tuning]:
    """Every strategy tuned on the validation users at every ε (see the module docstring), jointly with those of its
    group (:func:`_joint_groups`), a point's score the mean over the tuning seeds. With ``jobs`` > 1 each grid's
    runs go that many at once (:func:`run_ahead`) before the search reads them: every group's and ε's initial grid
    together, then the points each round of edge extensions adds (:func:`_unfinished`), so that the search itself
    finds every run finished."""
    groups = _joint_groups(placed)
    scored: dict[tuple[str, float | None, tuple[tuple[str, float], ...]], float] = {}

    def score(label: str, epsilon: float | None, point: Mapping[str, float]) -> float:
        key = (label, epsilon, tuple(point.items()))
        if key not in scored:
            runs = [run_one(placed.base, _tuning_spec(placed, out, label, epsilon, point, seed))
                    for seed in placed.tuning_seeds]
            scored[key] = sum(float(run.row[f"val_{run.headline}"]) for run in runs) / len(runs)
        return scored[key]

    if jobs != 1:
        for extensions in range(placed.max_extensions + 1):
            ahead = [spec for labels, axes in groups for epsilon in placed.tuning_epsilons
                     for spec in _unfinished(placed, out, labels, axes, epsilon, extensions, score)]
            if not ahead:
                break
            run_ahead(placed.base, ahead, jobs)
    tunings: dict[TuningKey, Tuning] = {}
    for labels, axes in groups:
        for epsilon in placed.tuning_epsilons:
            joint = tune_jointly(axes, {label: functools.partial(score, label, epsilon) for label in labels},
                                 higher_is_better=True, max_extensions=placed.max_extensions)
            tunings.update({(label, epsilon): joint[label] for label in labels})
    return {(label, epsilon): tunings[label, epsilon] for label in placed.axes for epsilon in placed.tuning_epsilons}


def _unfinished(placed: PlacedSweep, out: Path, labels: Sequence[str], axes: Sequence[Axis],
                epsilon: float | None, extensions: int,
                score: Callable[[str, float | None, Mapping[str, float]], float]) -> list[RunSpec]:
    """The tuning runs of ``labels`` (one joint group) at ``epsilon`` not yet finished that the search with at most
    ``extensions`` extensions asks for: once the grids before it have run, those of its last grid (a point with an
    unfinished run scores NaN, the worst, and the search stops at that grid)."""
    missing: list[RunSpec] = []

    def known(label: str, point: Mapping[str, float]) -> float:
        specs = [_tuning_spec(placed, out, label, epsilon, point, seed) for seed in placed.tuning_seeds]
        waiting = [spec for spec in specs if not RunDirectory(spec.out / spec.name).holds_finished_run()]
        missing.extend(waiting)
        return math.nan if waiting else score(label, epsilon, point)

    tune_jointly(axes, {label: functools.partial(known, label) for label in labels}, higher_is_better=True,
                 max_extensions=extensions)
    return missing


def _tuning_text(placed: PlacedSweep, tunings: Mapping[TuningKey, Tuning], control: str, quick: bool) -> str:
    seeds = placed.tuning_seeds
    groups = "; ".join(", ".join(f"`{label}`" for label in labels) for labels, _ in _joint_groups(placed))
    parts = ["Every arm tuned the same way (client lr and the server lr or clip norm, grids of one size)"
             + (" at every ε of the sweep" if placed.epsilons else "")
             + f", the arms of a claim that tune the same axes jointly on one union grid ({groups})."]
    parts += [f"`{label}`{f' at ε = {eps:g}' if eps is not None else ''}: {t.markdown()}"
              for (label, eps), t in tunings.items()]
    if control:
        parts.append(control)
    points = sum(t.evaluations for t in tunings.values())
    parts.append(f"Total tuning budget: {points} points × {len(seeds)} seed{'s' if len(seeds) > 1 else ''} "
                 f"({', '.join(map(str, seeds))}; a point's score is their mean) = {points * len(seeds)} runs on the "
                 "validation users, not counted in ε.")
    text = " ".join(parts)
    return ("Quick mode: two values of the first axis, one of the others, no extensions (nothing is really tuned). "
            + text if quick else text)


def _tuned_overrides(placed: PlacedSweep, tunings: Mapping[TuningKey, Tuning], label: str,
                     epsilon: float | None) -> dict[str, Any]:
    """A strategy's overrides with the values tuned for the test runs at ``epsilon`` (a control's: those of the
    strategy it follows)."""
    return _with_values(placed.strategies[label], tunings[placed.follows.get(label, label), epsilon].best)


def _round_zero(placed: PlacedSweep, out: Path, headline: str, kept: RowCache) -> tuple[list[Row], str]:
    """Every warm-started strategy's start (:mod:`.round_zero`) on every test seed (read from ``kept`` where it
    holds it): rows named :func:`~.round_zero.start_of` its label, with no ε (the warm start spends none), and a
    sentence for the tuning paragraph."""
    rows: list[Row] = []
    for label, overrides in placed.strategies.items():
        for seed in placed.seeds:
            config = RunSpec(overrides, None, seed, f"{label}__round0", out / "runs").config(placed.base)
            if config.strategy.warm_start is None:
                break
            rows.append({"strategy": start_of(label), "seed": seed, "target_epsilon": None,
                         **kept.metrics(config.name + f"__seed{seed}", config, {},
                                        functools.partial(warm_start_metrics, config))})
    text = "; ".join(f"`{name}` {statistics.fmean(r[f'eval_{headline}'] for r in rows if r['strategy'] == name):.4f}"
                     for name in dict.fromkeys(r["strategy"] for r in rows))
    return rows, (f"Round 0 of the warm-started arms (their warm start evaluated: the start each must improve on by "
                  f"{BEATS_MARGIN:g}), mean test {headline}: {text}." if text else "")


def _shared_point_claims(claims: Sequence[Claim], placed: PlacedSweep) -> tuple[Claim, ...]:
    """Every claim, each followed, where its two arms tune the same axes, by the claim judged with ``better`` run at
    ``worse``'s tuned values (:func:`at_point`; fedpub issue 45, item 1): there the difference is the mechanism's
    alone, not the distance between two tuned points. (A control that follows an arm already runs at its point.)"""
    found: list[Claim] = []
    for claim in claims:
        found.append(claim)
        if _same_axes(placed, claim.better, claim.worse):
            found.append(replace(claim, text=f"{claim.text} — both at {claim.worse}'s tuned values",
                                 better=at_point(claim.better, claim.worse)))
    return tuple(found)


def _private_step_gated(claims: Sequence[Claim], placed: PlacedSweep, tunings: Mapping[TuningKey, Tuning],
                        starts: Sequence[str]) -> tuple[Claim, ...]:
    """Each claim with the :class:`~.judge.PrivateStepOn` gate of its tuned arms (fedpub issue 45, item 2): not
    testable in a cell where the server lr an arm ran at (its own tuned one, or for ``<arm>@<owner>`` the owner's;
    :data:`PRIVATE_STEP`) sits at its grid's low edge, or where a warm-started arm (its round-0 rows in ``starts``)
    ends less than :data:`BEATS_MARGIN` past its own start."""
    def owner(arm: str) -> str:
        return split_point(arm)[1]

    by_cell = {(label, cell_of(eps)): tuning for (label, eps), tuning in tunings.items()}
    gated = []
    for claim in claims:
        arms = tuple(arm for arm in (claim.better, claim.worse) if owner(arm) in placed.axes)
        edges = low_edges(arms, by_cell, PRIVATE_STEP)
        own_starts = {arm: start_of(split_point(arm)[0]) for arm in arms if start_of(split_point(arm)[0]) in starts}
        gated.append(replace(claim, gates=(*claim.gates, PrivateStepOn(arms, edges, own_starts, BEATS_MARGIN)))
                     if arms else claim)
    return tuple(gated)


def _test_run_name(label: str, epsilon: float | None, seed: int) -> str:
    """A test run's name: a sweep's ``<label>__eps<ε>__seed<seed>``, without ε at the base's noise multiplier."""
    return run_name(label, epsilon, seed) if epsilon is not None else f"{label}__seed{seed}"


def run(repro: FederatedReproduction, argv: Sequence[str] | None = None) -> Path:
    """Tune, run the test sweep, judge the claims; write comparison.md and claims.json into ``--out``."""
    parser = argparse.ArgumentParser(description=repro.title)
    parser.add_argument("--out", type=Path, default=None,
                        help=f"output folder (default {default_out(repro.name, False)}, quick: "
                             f"{default_out(repro.name, True)})")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, a fixed noise multiplier, two-point tuning grids: a check that it and "
                             "its gates run")
    parser.add_argument("--jobs", type=parse_jobs, default=1,
                        help="runs at once, each in a worker process (auto: one per core); default 1")
    parser.add_argument("--seeds", type=int, default=None, metavar="N",
                        help="test seeds 0 to N-1 (default: the sweep file's); a rerun with more seeds keeps the "
                             "tuning and the finished runs and adds the new seeds' runs")
    args = parser.parse_args(argv)
    if args.seeds is not None and args.seeds < 3:
        parser.error(f"--seeds must be at least 3 (the claim judge needs 3 seeds a cell), got {args.seeds}")
    if args.seeds is not None and (overlap := sorted(set(range(args.seeds)) & set(repro.tuning_seeds))):
        parser.error(f"--seeds {args.seeds}: the test seeds {overlap} are {repro.name}'s tuning seeds "
                     f"({', '.join(map(str, repro.tuning_seeds))}); use at most {min(repro.tuning_seeds)}")
    out: Path = (args.out or default_out(repro.name, args.quick)).resolve()  # the runs record where they are
    # written; a folder moved elsewhere resumes there (output_dir is not part of what a run computes)
    started, earlier = time.perf_counter(), _earlier_wall_time(out)

    def spent() -> float:
        """The seconds spent on ``out``: earlier invocations' and this one's so far."""
        return earlier + time.perf_counter() - started

    try:
        with stops_between_steps():
            return _run(repro, args, out, spent)
    except (RunInterrupted, KeyboardInterrupt, RunsDidNotFinish) as stop:
        print(f"{repro.name}: stopped ({stop or 'interrupted'}); the finished runs are kept, run the same command "
              "again to resume", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    finally:
        if out.is_dir():  # a refusal before any run leaves no folder behind
            write_json_atomic(out / WALL_TIME_FILE, {"seconds": spent()})


WALL_TIME_FILE = "wall_time.json"
"""The seconds every invocation on a folder has spent, finished or stopped: a resumed reproduction records the
whole run's time, not its last invocation's."""


def _earlier_wall_time(out: Path) -> float:
    """The seconds earlier invocations spent on ``out``: its :data:`WALL_TIME_FILE`'s, else (a folder from before
    the file) its ``claims.json``'s, else 0."""
    ledger, claims = out / WALL_TIME_FILE, out / "claims.json"
    if ledger.exists():
        return float(json.loads(ledger.read_text())["seconds"])
    return read_claims_json(claims).wall_time_s if claims.exists() else 0.0


def _run(repro: FederatedReproduction, args: argparse.Namespace, out: Path, spent: Callable[[], float]) -> Path:
    """:func:`run` once its arguments are parsed; ``spent()``: the seconds spent on ``out`` so far."""
    placed = place(repro, out, args.quick, args.seeds)
    tunings = _tune(placed, out, args.jobs)
    epsilons = placed.epsilons or (None,)
    tuned = {(label, eps): _tuned_overrides(placed, tunings, label, eps) for label in placed.strategies
             for eps in epsilons}
    out.mkdir(parents=True, exist_ok=True)
    strategies_as_run: dict[str, Any] = (
        {label: {f"epsilon {eps:g}": tuned[label, eps] for eps in epsilons} for label in placed.strategies}
        if placed.epsilons else {label: tuned[label, None] for label in placed.strategies})
    write_text_atomic(out / "sweep.yaml", yaml.safe_dump(
        {"base": placed.base, **({"epsilons": list(placed.epsilons)} if placed.epsilons else {}),
         "seeds": list(placed.seeds), "strategies": strategies_as_run}, sort_keys=False))
    claims = _shared_point_claims(repro.claims, placed)
    shared = {c.better: split_point(c.better) for c in claims if split_point(c.better)[1] != c.better}
    specs = [RunSpec(tuned[label, epsilon], epsilon, seed, _test_run_name(label, epsilon, seed), out / "runs")
             for label in placed.strategies for epsilon in epsilons for seed in placed.seeds]
    specs += [RunSpec(_with_values(placed.strategies[better], tunings[worse, epsilon].best), epsilon, seed,
                      _test_run_name(f"{better}.at.{worse}", epsilon, seed), out / "runs", label=arm)
              for arm, (better, worse) in shared.items() for epsilon in epsilons for seed in placed.seeds]
    run_ahead(placed.base, specs, args.jobs)
    compared = []
    for spec in specs:
        run = run_one(placed.base, spec)
        compared.append(run)
        print(f"{run.row['strategy']} ε={run.row['epsilon']:.3g} seed {spec.seed}: {run.headline} "
              f"{run.row[f'eval_{run.headline}']:.4f}", flush=True)
    write_comparison(out, compared, repro.title)
    rows, headline = [c.row for c in compared], compared[0].headline
    if placed.epsilons is None:  # one noise multiplier: one cell, at the largest ε a run achieved
        rows = [{**r, "target_epsilon": float(f"{max(r['epsilon'] for r in rows):.3g}")} for r in rows]
    kept = RowCache(out / KEPT_FOLDER)
    control_rows, control_text = ([], "") if repro.control is None else repro.control(
        placed.base, placed.seeds, args.quick, kept)
    start_rows, start_text = _round_zero(placed, out, headline, kept)
    landscapes: dict[str, dict[str, list[float]]] = {}
    for (label, eps), t in tunings.items():
        landscapes.setdefault(label, {})[cell_of(eps)] = list(t.scores.values())
    every_row = [*rows, *control_rows, *start_rows]
    claims = _private_step_gated(claims, placed, tunings, {r["strategy"] for r in start_rows})
    judged = judge_claims(results_of(every_row, headline), claims, repro.gates, landscapes,
                          gate_results=results_of(every_row, headline, split="val"))
    following = [f"`{control}` runs at `{owner}`'s tuned values (not tuned itself)."
                 for control, owner in repro.follows.items()]
    if shared:
        following.append("Each claim whose arms tune the same axes is judged twice: at each arm's tuned values, and "
                         "with the better arm at the other's (" + ", ".join(f"`{arm}`" for arm in shared) + ").")
    tuning = _tuning_text(placed, tunings, " ".join(t for t in (*following, control_text, start_text) if t),
                          args.quick)
    lines = [f"# {repro.title}", "", repro.paper, ""]
    if repro.setting is not None:
        lines += [repro.setting(rows, placed.base), ""]
    lines += ["## Claims checked", "", RULE, "",
              *(j.sentence(c.text, c.better, c.worse) for c, j in zip(claims, judged, strict=True)), ""]
    if repro.note:
        lines += [repro.note, ""]
    lines += ["## Tuning", "", tuning, "",
              (f"The table is `{TABLE_FILE}`, the plots `{EPSILON_PLOT}` and `{ROUND_PLOT}`; the sweep as run is "
               "`sweep.yaml`."), ""]
    write_text_atomic(out / "comparison.md", "\n".join(lines))
    print("\n".join(lines))
    command = (f"python -m fedpub.simulations.reproductions.{repro.name}" + (" --quick" if args.quick else "")
               + (f" --seeds {args.seeds}" if args.seeds is not None else ""))
    write_claims_json(out, ReproductionRecord(
        repro.name, repro.seed_paper, repro.title, repro.paper, command, args.quick, len(placed.seeds),
        spent(), tuning, RULE,
        tuple(ClaimRecord.of(c.text, c.better, c.worse, j, c.paper_figure)
              for c, j in zip(claims, judged, strict=True)),
        ("comparison.md", TABLE_FILE), (EPSILON_PLOT, ROUND_PLOT),
    ))
    return out / "comparison.md"
