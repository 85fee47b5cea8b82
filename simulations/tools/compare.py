"""``fedpub compare``: every (strategy, ε, seed) of a sweep file, run in process (several at once with ``--jobs``:
:mod:`fedpub.simulations.tools.sweep_jobs`) or on Flower simulation (``--backend flower``; with SecAgg+,
``--backend secagg``), then compared.

A sweep file names a base experiment config (a path relative to the sweep file, or an inline
mapping), target ε values, seeds and strategies, each a label with overrides deep-merged over the
whole base. Run (label, ε, seed) is the merged config with ``strategy.target_epsilon`` = ε (z is
calibrated, and cached, per strategy and ε), ``seed``, ``name`` = ``<label>__eps<ε>__seed<seed>``
and its directory under ``<output_dir>/<sweep name>/runs/``. A finished run's row is recorded at
once (``compare.csv``, rewritten atomically), so a rerun skips recorded runs and resumes a
half-done one from its checkpoint; a failed run is reported and the sweep goes on.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator
from rich.console import Console
from rich.markup import escape

from fedpub.atomic import write_text_atomic
from fedpub.config import ConfigError, ExperimentConfig, apply_overrides, dump_config, parse_config
from fedpub.strict_yaml import load_yaml
from fedpub.tasks import get_task
from fedpub.simulations.tools.compare_report import (
    CSV_FILE,
    OUTPUT_FILES,
    ComparedRun,
    csv_text,
    eval_curve,
    read_csv,
    read_run,
    run_name,
    write_comparison,
)
from fedpub.simulations.run.backends import Backend, check_config_for, run_experiment
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.progress import RoundDisplay
from fedpub.simulations.run.run_dir import RunDirectory
from fedpub.simulations.run.run_lock import RunLock
from fedpub.simulations.run.session import RunInterrupted, run_changes
from fedpub.simulations.tools.sweep_jobs import (
    JobOutcome,
    available_cores,
    check_jobs,
    resolve_jobs,
    run_jobs,
    threads_per_job,
)

NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
LABEL = re.compile(r"[A-Za-z0-9.-]+(_[A-Za-z0-9.-]+)*")
"""A strategy label: a run name's characters, no ``__`` (it separates the label in run names)."""


class SweepConfig(BaseModel):
    """A sweep file (see the module docstring); unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base: Path | dict[str, Any] = Field(description="experiment YAML (relative to the sweep file) or mapping")
    name: str | None = Field(None, pattern=NAME_PATTERN, description="output folder; default: the file's stem")
    output_dir: Path | None = Field(None, description="default: the base config's output_dir")
    epsilons: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    strategies: dict[str, dict[str, Any] | None] = Field(min_length=1, description="label -> overrides")

    @field_validator("epsilons", "seeds")
    @classmethod
    def _distinct(cls, values: list) -> list:
        if len(set(values)) != len(values):
            raise ValueError("values must be distinct")
        return values

    @field_validator("strategies")
    @classmethod
    def _labels(cls, strategies: dict[str, Any]) -> dict[str, Any]:
        for label in strategies:
            if not LABEL.fullmatch(label):
                raise ValueError(f"label {label!r}: use letters, digits, '.', '-' and single '_' inside")
        return strategies


@dataclass(frozen=True)
class SweepRun:
    label: str
    target_epsilon: float
    seed: int
    config: ExperimentConfig

    @property
    def run_dir(self) -> RunDirectory:
        return RunDirectory(self.config.output_dir / self.config.name)

    @property
    def key(self) -> tuple[str, float, int]:
        return self.label, self.target_epsilon, self.seed

    def describe(self) -> str:
        return f"{self.label} ε={self.target_epsilon:g} seed {self.seed}"


@dataclass(frozen=True)
class Sweep:
    name: str
    root: Path
    """``<output_dir>/<name>``: compare.csv, compare.md, the plots and ``runs/``."""
    runs: tuple[SweepRun, ...]
    headline: str


@dataclass(frozen=True)
class RunFailure:
    run: SweepRun
    error: str


@dataclass(frozen=True)
class SweepResult:
    failures: list[RunFailure]
    table: str | None
    """compare.md's text; None when no run has finished."""


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in: mappings merge key by key, anything else replaces."""
    merged = dict(base)
    for key, value in overrides.items():
        both = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = deep_merge(merged[key], value) if both else value
    return merged


def _read_yaml(path: Path, context: str = "") -> Any:
    try:
        return load_yaml(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{context}cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def _describe(error: Any) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"unknown key `{where}`; allowed keys here: {', '.join(SweepConfig.model_fields)}"
    return f"field `{where}`: {error['msg']}"


def load_sweep(path: Path, overrides: Sequence[str] = ()) -> Sweep:
    """Read a sweep file and validate it and every run's merged config; ConfigError names the field.
    ``overrides`` (``--set KEY=VALUE``) are applied to the base config, under the strategies' overrides."""
    path = Path(path)
    try:
        sweep = SweepConfig.model_validate(_read_yaml(path))  # not a mapping: an error at the top level
    except pydantic.ValidationError as exc:
        problems = "\n".join(f"  - {_describe(e)}" for e in exc.errors())
        raise ConfigError(f"{path}: invalid sweep\n{problems}") from None
    if isinstance(sweep.base, dict):
        base, base_source = sweep.base, "the inline base"
    else:
        base_path = path.parent / sweep.base
        base, base_source = _read_yaml(base_path, f"{path}: field `base`: ") or {}, str(base_path)
        if not isinstance(base, dict):
            raise ConfigError(f"{base_path}: the top level must be a mapping of keys")
    if overrides:
        base = apply_overrides(copy.deepcopy(base), overrides)
        base_source += "".join(f" --set {item}" for item in overrides)
    name = sweep.name or path.stem
    output_dir = sweep.output_dir or base.get("output_dir") or ExperimentConfig.model_fields["output_dir"].default
    root = Path(output_dir) / name
    runs = []
    for label, overrides in sweep.strategies.items():
        merged = deep_merge(base, overrides or {})
        for epsilon in sweep.epsilons:
            strategy = {**(merged.get("strategy") or {}), "target_epsilon": epsilon, "noise_multiplier": None}
            for seed in sweep.seeds:
                raw_run = {**merged, "strategy": strategy, "seed": seed, "name": run_name(label, epsilon, seed),
                           "output_dir": str(root / "runs")}
                config = parse_config(raw_run, f"{path}: strategies.{label} over {base_source}")
                runs.append(SweepRun(label, epsilon, seed, config))
    tasks = {run.config.task for run in runs}
    if len(tasks) > 1:
        raise ConfigError(f"{path}: the strategies run different tasks ({', '.join(sorted(tasks))}); compare one task")
    return Sweep(name, root, tuple(runs), get_task(tasks.pop()).headline)


def run_sweep(
    sweep: Sweep,
    *,
    fresh: bool = False,
    console: Console | None = None,
    backend: Backend = "inprocess",
    started: Callable[[RunDirectory], None] | None = None,
    jobs: int = 1,
) -> SweepResult:
    """Run every run not yet recorded (all of them with ``fresh``) on ``backend``, then write the comparison,
    holding the sweep directory's lock (a second sweep of it is refused: :class:`RunDirectoryLocked`).
    ``started`` is told each run's directory as it starts. ``jobs``: how many runs at once (in process only; 0: one
    per core, :mod:`fedpub.simulations.tools.sweep_jobs`); 1 runs them one after the other with a progress display. An
    interrupted run (Ctrl-C, SIGTERM) stops the sweep: :class:`~fedpub.simulations.run.session.RunInterrupted` (or
    KeyboardInterrupt) goes up, the run checkpointed; with several at once, :class:`SweepInterrupted`."""
    check_jobs(jobs, backend)
    for run in sweep.runs:
        check_config_for(backend, run.config)
    with RunLock(sweep.root, "sweep directory"):
        results = _Results(sweep, fresh, console or Console())
        jobs = resolve_jobs(jobs, sum(not results.is_recorded(run) for run in sweep.runs))
        if jobs == 1:
            _one_by_one(results, fresh, backend, started)
        else:
            _at_once(results, fresh, jobs, started)
        return SweepResult(results.failures, results.comparison())


class SweepInterrupted(Exception):
    """A sweep running several runs at once was stopped (Ctrl-C, SIGTERM): the finished runs are recorded, those under
    way checkpointed (``stopped``: each with its rounds done, None when stopped mid-round: its checkpoint says), the
    ``not_started`` others not started; running it again resumes."""

    def __init__(self, stopped: list[tuple[SweepRun, int | None]], not_started: int) -> None:
        super().__init__(f"interrupted: {len(stopped)} runs checkpointed, {not_started} not started")
        self.stopped, self.not_started = stopped, not_started


class _Results:
    """The sweep's finished runs: recorded in ``compare.csv`` (rewritten in the sweep's run order) as each one ends,
    and said on the console; the failed ones listed."""

    def __init__(self, sweep: Sweep, fresh: bool, console: Console) -> None:
        self.sweep, self.console = sweep, console
        self.csv_path = sweep.root / CSV_FILE
        if fresh:
            for name in OUTPUT_FILES:
                (sweep.root / name).unlink(missing_ok=True)
        rows = read_csv(self.csv_path) if self.csv_path.exists() else []
        self.recorded = {(r["strategy"], r["target_epsilon"], r["seed"]): r for r in rows}
        self.done: dict[tuple[str, float, int], ComparedRun] = {}
        self.failures: list[RunFailure] = []
        self._position = {run.key: i for i, run in enumerate(sweep.runs, 1)}

    def step(self, run: SweepRun) -> str:
        """``[i/n] <run>``: the line's start for ``run``."""
        return f"[{self._position[run.key]}/{len(self.sweep.runs)}] {run.describe()}"

    def is_recorded(self, run: SweepRun) -> bool:
        """Whether ``compare.csv`` holds ``run``, whose directory holds the same config."""
        stored = run.run_dir.stored_config()
        return run.key in self.recorded and stored is not None and not run_changes(stored, dump_config(run.config))

    def skip(self, run: SweepRun) -> bool:
        """Take a recorded run's row (and say so) and return True; False for a run to do."""
        if not self.is_recorded(run):
            return False
        headline = self.sweep.headline
        self.done[run.key] = ComparedRun(self.recorded[run.key], eval_curve(run.run_dir.read_metrics(), headline),
                                         headline)
        self.console.print(f"{self.step(run)}: recorded, skipped", highlight=False)
        return True

    def finished(self, run: SweepRun, final_metrics: dict[str, Any], epsilon: float, rounds_done: int,
                 seconds: float, tail: str = "") -> None:
        """Record a finished run (``compare.csv`` rewritten at once) and say its figures, then ``tail`` (one line)."""
        headline = self.sweep.headline
        self.done[run.key] = read_run(run.run_dir, run.label, final_metrics)
        rows = [self.done[r.key].row for r in self.sweep.runs if r.key in self.done]
        write_text_atomic(self.csv_path, csv_text(rows, headline))
        metric = final_metrics.get(f"eval_{headline}", float("nan"))
        self.console.print(
            f"{self.step(run)}: {headline} {metric:.4f}, ε {epsilon:.4g} after {rounds_done} rounds, {seconds:.1f} s"
            + tail, highlight=False, soft_wrap=bool(tail),  # with a tail (runs at once): never wrapped, one line each
        )

    def failed(self, run: SweepRun, kind: str, message: str, tail: str = "") -> None:
        """List a failed run (its error's ``kind`` and ``message``) and say so, then ``tail`` (on one line)."""
        self.failures.append(RunFailure(run, f"{kind}: {message}"))
        self.console.print(f"{self.step(run)}: [red]failed[/]: {escape(message)}{escape(tail)}", highlight=False,
                           soft_wrap=bool(tail))

    def comparison(self) -> str | None:
        """Write compare.md and the plots over the finished runs; their table (None when no run has finished)."""
        compared = [self.done[r.key] for r in self.sweep.runs if r.key in self.done]
        return write_comparison(self.sweep.root, compared, f"Comparison `{self.sweep.name}`") if compared else None


def _one_by_one(
    results: _Results, fresh: bool, backend: Backend, started: Callable[[RunDirectory], None] | None
) -> None:
    """Run the sweep's runs in this process, one after the other, each with a progress display."""
    headline = results.sweep.headline
    for run in results.sweep.runs:
        if results.skip(run):
            continue
        results.console.print(f"{results.step(run)}: started", highlight=False)
        if started is not None:
            started(run.run_dir)
        began = time.perf_counter()
        try:
            with RoundDisplay(results.console, run.config.rounds, headline, f"{run.describe()}: round") as display:
                result = run_experiment(
                    build_experiment(run.config), backend, fresh=fresh, on_round=display.on_round,
                    on_resume=display.on_resume,
                )
        except RunInterrupted:
            raise
        except Exception as error:  # noqa: BLE001 — one failed run must not stop the sweep
            results.failed(run, type(error).__name__, str(error))
            continue
        results.finished(run, result.final_metrics, result.epsilon, result.rounds_done, time.perf_counter() - began)


def _at_once(results: _Results, fresh: bool, jobs: int, started: Callable[[RunDirectory], None] | None) -> None:
    """Run the sweep's runs in process, ``jobs`` at once in worker processes: a line as each starts and ends."""
    todo = [run for run in results.sweep.runs if not results.skip(run)]
    if not todo:
        return
    threads = threads_per_job(jobs)
    results.console.print(
        f"{jobs} runs at once, each in its own process with {threads} torch thread{'s' * (threads > 1)} "
        f"({available_cores()} cores)", highlight=False,
    )
    ended: list[JobOutcome] = []
    stopped: list[tuple[SweepRun, int | None]] = []

    def on_start(index: int) -> None:
        results.console.print(f"{results.step(todo[index])}: started", highlight=False)
        if started is not None:
            started(todo[index].run_dir)

    def on_end(outcome: JobOutcome) -> None:
        run = todo[outcome.index]
        if outcome.status == "interrupted":
            stopped.append((run, outcome.rounds_done))
            results.console.print(f"{results.step(run)}: interrupted", highlight=False)
            return
        ended.append(outcome)
        tail = f"; {len(ended)} of {len(todo)} done"
        if outcome.status == "failed":
            results.failed(run, outcome.error_kind, outcome.error, tail)
        else:
            results.finished(run, outcome.final_metrics, outcome.epsilon, outcome.rounds_done, outcome.seconds, tail)

    if run_jobs([run.config for run in todo], jobs, fresh=fresh, started=on_start, ended=on_end) or stopped:
        raise SweepInterrupted(stopped, len(todo) - len(ended) - len(stopped))
