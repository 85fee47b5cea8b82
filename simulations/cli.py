"""The `fedpub` command line: run an experiment, account for a mechanism, calibrate noise.

    fedpub run [CONFIG.yaml]      run (or resume) an experiment; no CONFIG runs the quick-start
    fedpub account ...            user-level ε of T rounds of the sampled Gaussian, PLD and RDP
    fedpub calibrate ...          the noise multiplier z reaching a target ε
    fedpub compare SWEEP.yaml     run every (strategy, ε, seed) of a sweep and compare them
    fedpub report RUN_DIR...      the same comparison table and plots from existing runs
    fedpub audit CONFIG.yaml      empirical ε from canary clients, against the accountant's
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from fedpub.config import ConfigError, load_config
from fedpub.data.base import DatasetError
from fedpub.privacy.errors import PrivacyError
from fedpub.privacy.events import CohortRule, EpochBlocks, FixedSizeSampling, PoissonSampling
from simulations.configs import quickstart_config_path
from simulations.data_cli import data_app

app = typer.Typer(add_completion=False, no_args_is_help=True, help="User-level DP federated learning with public users.")
app.add_typer(data_app, name="data", help="Inspect, verify and download TFF's federated EMNIST and StackOverflow files.")
console = Console()
USER_ERRORS = (ConfigError, DatasetError, PrivacyError, ValueError, FileNotFoundError)


def _fail(error: Exception) -> None:
    console.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _sampling(q: Optional[float], population: Optional[int], cohort: Optional[int]):
    from fedpub.privacy.events import FixedSizeSampling, PoissonSampling

    if q is not None and (population is None and cohort is None):
        return PoissonSampling(q)
    if q is None and population is not None and cohort is not None:
        return FixedSizeSampling(population=population, cohort_size=cohort)
    raise PrivacyError("give --q (Poisson sampling) or both --population and --cohort (fixed size)")


def _round_progress(label: str = "round") -> Progress:
    """A progress bar over rounds whose status column a :func:`_round_reporter` fills."""
    return Progress(
        TextColumn(f"{label} {{task.completed}}/{{task.total}}"),
        BarColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def _round_reporter(progress: Progress, task: TaskID, metric: str) -> Callable[[dict[str, Any]], None]:
    """An ``on_round`` callback moving ``task`` on and showing the headline metric, ε and the realised cohort (a
    diagnostic the server sees; shown on its console, never written to a released file)."""
    status = {"acc": "–", "epsilon": "–"}

    def on_round(record: dict[str, Any]) -> None:
        if f"eval_{metric}" in record:
            status["acc"] = f"{record[f'eval_{metric}']:.3f}"
        if "epsilon" in record:
            status["epsilon"] = f"{float(record['epsilon']):.3g}"
        progress.update(
            task,
            completed=record["round"] + 1,
            status=f"{metric} {status['acc']}  ε {status['epsilon']}  "
            f"cohort {int(record['diagnostics']['cohort_sampled'])}",
        )

    return on_round


def _cohort_rule(rule: CohortRule) -> str:
    """How a run's cohorts are chosen, in a few words."""
    if isinstance(rule, PoissonSampling):
        return f"Poisson, q={rule.sampling_rate:.4g}"
    if isinstance(rule, EpochBlocks):
        return f"no sampling: epoch blocks, {rule.rounds_per_epoch} rounds an epoch"
    if isinstance(rule, FixedSizeSampling):
        return f"fixed size, {rule.cohort_size} of {rule.population} without replacement"
    return type(rule).__name__


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Argument(help="experiment YAML; omit for the bundled quick-start")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="discard an existing run of the same name")] = False,
    backend: Annotated[str, typer.Option(help="inprocess (fast) or flower (Flower simulation, Ray)")] = "inprocess",
    tune_allocator: Annotated[bool, typer.Option(
        "--tune-allocator",
        help="in process: make glibc keep freed memory (mallopt: no mmap, no trim) so large cohorts' round "
        "buffers are reused; process-wide for the rest of the run, which keeps its peak memory",
    )] = False,
) -> None:
    """Run an experiment and write runs/<name>/ (resumes a checkpointed run).

    CONFIG: the experiment YAML; omit it for the bundled quick-start."""
    from simulations.backends import check_backend, run_experiment
    from simulations.engine import CohortsKeepFailing, RunDirectoryError
    from simulations.experiment import build_experiment
    from simulations.run_dir import RunDirectory

    try:
        backend = check_backend(backend, tune_allocator=tune_allocator)
    except ValueError as error:
        _fail(error)

    path = config or quickstart_config_path()
    try:
        cfg = load_config(path)
        with console.status("preparing data, model and noise calibration"):
            experiment = build_experiment(cfg)
    except USER_ERRORS as error:
        _fail(error)
    strategy = experiment.strategy
    console.print(
        f"[bold]{cfg.name}[/]: {strategy.name}, N={strategy.population} private users, "
        f"expected cohort {strategy.expected_cohort:g} ({_cohort_rule(strategy.sampling)}), "
        f"z={experiment.noise_multiplier:.4g}, C={cfg.strategy.clip_norm:g}, {cfg.rounds} rounds, "
        f"device {experiment.device}, backend {backend}",
        highlight=False,
    )
    console.print(f"randomness {experiment.randomness.statement()}", highlight=False)
    console.print(f"evaluated on {experiment.eval_users.label}", highlight=False)
    run_dir = RunDirectory(cfg.output_dir / cfg.name)
    progress = _round_progress()
    metric = experiment.task.headline
    with progress:
        on_round = _round_reporter(progress, progress.add_task("rounds", total=cfg.rounds, status=""), metric)
        try:
            result = run_experiment(
                experiment, backend, fresh=fresh, on_round=on_round, tune_allocator=tune_allocator,
                log=lambda line: progress.console.print(line, highlight=False, markup=False),
            )
        except (RunDirectoryError, CohortsKeepFailing, *USER_ERRORS) as error:
            progress.stop()
            _fail(error)
    if result.stopped_by_budget:
        console.print(f"stopped after {result.rounds_done} rounds: the next round would exceed ε = {cfg.privacy.budget_epsilon}")
    console.print(
        f"final test {metric} [bold]{result.final_metrics[f'eval_{metric}']:.4f}[/] after {result.rounds_done} rounds; "
        f"user-level (ε, δ) = ([bold]{result.epsilon:.4g}[/], {result.delta:g})",
        highlight=False,
    )
    diagnostics = ", diagnostics.jsonl (outside the DP guarantee)" if experiment.diagnostics else ""
    console.print(f"results in {run_dir.root}/ (summary.md, metrics.jsonl, ledger.json, accuracy.png{diagnostics})")


@app.command()
def account(
    rounds: Annotated[int, typer.Option("--rounds", "-T", min=1, help="number of rounds T")],
    noise_multiplier: Annotated[float, typer.Option("--noise-multiplier", "-z", min=0.0, help="z = noise std / C")],
    delta: Annotated[float, typer.Option(help="δ")] = 1e-5,
    q: Annotated[Optional[float], typer.Option("--q", help="Poisson sampling rate")] = None,
    population: Annotated[Optional[int], typer.Option(help="N, for fixed-size sampling")] = None,
    cohort: Annotated[Optional[int], typer.Option(help="m, for fixed-size sampling")] = None,
) -> None:
    """User-level ε after T rounds of the sampled Gaussian mechanism, with PLD and RDP."""
    from fedpub.privacy.accountant import cross_check
    import dp_accounting

    from fedpub.privacy.events import neighboring_relation, round_event

    try:
        sampling = _sampling(q, population, cohort)
        event = dp_accounting.SelfComposedDpEvent(
            round_event(sampling, [dp_accounting.GaussianDpEvent(noise_multiplier)]), rounds
        )
        values = cross_check(event, delta, neighboring_relation(sampling))
    except USER_ERRORS as error:
        _fail(error)
    table = Table(title=f"user-level ε at δ={delta:g} after {rounds} rounds, z={noise_multiplier:g}, {sampling}")
    table.add_column("accountant")
    table.add_column("ε", justify="right")
    for name in ("pld", "rdp"):
        value = values.get(name)
        table.add_row(name.upper(), "unsupported for this sampling" if value is None else f"{value:.4f}")
    console.print(table)


@app.command()
def calibrate(
    target_epsilon: Annotated[float, typer.Option("--target-epsilon", "-e", help="target ε")],
    rounds: Annotated[int, typer.Option("--rounds", "-T", min=1)],
    delta: Annotated[float, typer.Option(help="δ")] = 1e-5,
    q: Annotated[Optional[float], typer.Option("--q", help="Poisson sampling rate")] = None,
    population: Annotated[Optional[int], typer.Option(help="N, for fixed-size sampling")] = None,
    cohort: Annotated[Optional[int], typer.Option(help="m, for fixed-size sampling")] = None,
    accountant: Annotated[str, typer.Option(help="pld or rdp")] = "pld",
) -> None:
    """The smallest noise multiplier z whose ε after T rounds is at most the target (cached)."""
    from fedpub.privacy.calibration import calibrate_noise_multiplier

    if accountant not in ("pld", "rdp"):
        _fail(ValueError(f"--accountant must be pld or rdp, got {accountant!r}"))
    if accountant == "pld" and q is None and (population is not None or cohort is not None):
        _fail(ValueError("fixed-size sampling (--population, --cohort) is accounted by RDP only (replace-one "
                         "neighbours): add --accountant rdp"))
    try:
        z = calibrate_noise_multiplier(target_epsilon, delta, _sampling(q, population, cohort), rounds, accountant=accountant)
    except USER_ERRORS as error:
        _fail(error)
    console.print(f"noise multiplier z = [bold]{z!r}[/] ({accountant.upper()}, ε ≤ {target_epsilon:g}, δ = {delta:g}, T = {rounds})", highlight=False)


def _show_comparison(table: str, out_dir: Path) -> None:
    console.print(Markdown(table))
    console.print(f"results in {out_dir}/ (compare.md, compare.csv, accuracy_vs_epsilon.png, accuracy_vs_round.png)")


@app.command()
def compare(
    sweep: Annotated[Path, typer.Argument(help="sweep YAML: base config, epsilons, seeds, strategies (see README)")],
    fresh: Annotated[bool, typer.Option("--fresh", help="discard recorded results and restart every run")] = False,
    backend: Annotated[str, typer.Option(help="inprocess (fast) or flower (Flower simulation, Ray)")] = "inprocess",
) -> None:
    """Run every (strategy, ε, seed) of a sweep (resumable) in process or on Flower simulation, then write
    compare.csv, compare.md and the ε–accuracy and round–accuracy plots into <output_dir>/<name>/.

    SWEEP: the sweep YAML (base config, epsilons, seeds, strategies; see the README)."""
    from simulations.backends import check_backend
    from simulations.compare import load_sweep, run_sweep

    try:
        backend = check_backend(backend)
        plan = load_sweep(sweep)
    except USER_ERRORS as error:
        _fail(error)
    console.print(f"[bold]{plan.name}[/]: {len(plan.runs)} runs into {plan.root}/ (backend {backend})", highlight=False)
    result = run_sweep(plan, fresh=fresh, console=console, backend=backend)
    if result.table is not None:
        _show_comparison(result.table, plan.root)
    if result.failures:
        console.print(f"[bold red]{len(result.failures)} of {len(plan.runs)} runs failed:[/]")
        for f in result.failures:
            console.print(f"  {f.run.describe()}: {escape(f.error)}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="run directories (runs/<name>/)")],
    out: Annotated[Optional[Path], typer.Option(help="where to write; default: the runs' common parent")] = None,
) -> None:
    """Compare finished runs: compare.csv, compare.md (mean ± std over seeds per strategy and ε) and plots.
    A run's label is <label> of a compare run named <label>__eps<ε>__seed<seed>, else its strategy.name.

    RUN_DIRS: the run directories (runs/<name>/), one or more."""
    from simulations.compare_report import report_runs

    out_dir = out or Path(os.path.commonpath([p.resolve().parent for p in run_dirs]))
    try:
        table = report_runs(run_dirs, out_dir)
    except USER_ERRORS as error:
        _fail(error)
    _show_comparison(table, out_dir)


@app.command()
def audit(
    config: Annotated[Path, typer.Argument(help="experiment YAML to audit")],
    canaries: Annotated[int, typer.Option(help="canary clients, half inserted and half held out (>= 4)")] = 1000,
    noise_scale: Annotated[
        Optional[list[float]],
        typer.Option("--noise-scale", help="run with z·scale while claiming the ε of z (repeatable; < 1 breaks the mechanism)"),
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of the canaries and the bootstrap")] = 0,
    fresh: Annotated[bool, typer.Option("--fresh", help="discard existing audit runs and start over")] = False,
    observe: Annotated[str, typer.Option(
        help="what the attacker sees: final (the final model) or all-iterates (every round's model)")] = "final",
) -> None:
    """Estimate ε empirically with canary clients (Andrew et al., ICLR 2024) and compare it with the
    accountant's ε: one run per noise scale, into <output_dir>/<name>_audit_x<scale>_k<canaries>_s<seed>/.

    CONFIG: the experiment YAML to audit."""
    from fedpub.tasks import get_task
    from simulations.audit import check_options, output_names, run_audit
    from simulations.engine import RunDirectoryError

    scales = noise_scale or [1.0]
    try:
        check_options(canaries, scales, observe)
        cfg = load_config(config)
    except USER_ERRORS as error:
        _fail(error)
    metric, results = get_task(cfg.task).headline, []
    for scale in scales:
        progress = _round_progress(f"noise ×{scale:g}: round")
        with progress:
            on_round = _round_reporter(progress, progress.add_task("rounds", total=cfg.rounds, status=""), metric)
            try:
                results.append(run_audit(cfg, canaries=canaries, noise_scale=scale, seed=seed, fresh=fresh,
                                         on_round=on_round, observe=observe))
            except (RunDirectoryError, *USER_ERRORS) as error:
                progress.stop()
                _fail(error)
    delta = results[0].delta
    seen = "the final model" if observe == "final" else "every round's model (all iterates)"
    table = Table(title=f"{cfg.name}: empirical ε from {canaries} canaries, attacker sees {seen}, δ = {delta:g}, "
                        f"{cfg.rounds} rounds")
    for column in ("noise scale", "z used", "claimed ε", "empirical ε [95%]", "μ", "verdict"):
        table.add_column(column, justify="left" if column == "verdict" else "right")
    for r in results:
        low, high = r.interval
        table.add_row(
            f"{r.noise_scale:g}", f"{r.noise_multiplier_used:.4g}", f"{r.claimed_epsilon:.4g}",
            f"{r.empirical_epsilon:.3g} [{low:.3g}, {high:.3g}]", f"{r.mu:.3g}",
            r.verdict if r.verdict == "consistent" else f"[bold red]{r.verdict}[/]",
        )
    console.print(table)
    for r in results:
        console.print(f"results in {r.run_dir}/ ({', '.join(output_names(r.observe))})", highlight=False,
                      soft_wrap=True)


def main() -> None:
    app()
