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
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape
from rich.table import Table

from fedpub.config import ExperimentConfig, load_config
from fedpub.simulations.configs import quickstart_config_path
from fedpub.simulations.tools.data_cli import data_app
from fedpub.simulations.tools.error_report import expected_message, report_unexpected
from fedpub.simulations.run.progress import RoundDisplay
from fedpub.simulations.tools.threads import ThreadChoice, apply_thread_choice, choose_threads, thread_line

BACKEND_HELP = ("inprocess (fast), flower (Flower simulation, Ray) or secagg (Flower simulation with SecAgg+: the "
                "server sees only each cohort's sum; fixed-size cohorts, RDP accounting)")

if TYPE_CHECKING:
    from fedpub.privacy.events import CohortRule
    from fedpub.simulations.run.experiment import Experiment
    from fedpub.simulations.run.run_dir import RunDirectory

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="User-level DP federated learning with public users.",
    pretty_exceptions_enable=False, pretty_exceptions_show_locals=False,  # main() reports errors, with no locals
)
app.add_typer(data_app, name="data", help=data_app.info.help)
console = Console()
errors = Console(stderr=True)
USER_ERRORS = (ValueError, FileNotFoundError)
"""What a user's input can cause, shown as one line: fedpub's ConfigError, DatasetError and PrivacyError are
ValueErrors (named here through their base, so that `fedpub --help` imports neither torch nor dp-accounting)."""


def _rank() -> str:
    """``rank R: `` in a torchrun worker, whose every rank says its own error; else nothing."""
    return f"rank {os.environ['RANK']}: " if "RANK" in os.environ and "WORLD_SIZE" in os.environ else ""


def _fail(error: Exception) -> None:
    console.quiet = False  # a rank other than torchrun's rank 0 says its own error
    console.print(f"[bold red]error:[/] {_rank()}{escape(expected_message(error))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _sampling(q: Optional[float], population: Optional[int], cohort: Optional[int], groups: Optional[int] = None):
    from fedpub.privacy.errors import PrivacyError
    from fedpub.privacy.events import CyclicFixedSizeSampling, CyclicPoissonSampling, FixedSizeSampling, PoissonSampling

    if q is not None and (population is None and cohort is None):
        return PoissonSampling(q) if groups is None else CyclicPoissonSampling(q, groups)
    if q is None and population is not None and cohort is not None:
        if groups is None:
            return FixedSizeSampling(population=population, cohort_size=cohort)
        return CyclicFixedSizeSampling(population=population, cohort_size=cohort, groups=groups)
    raise PrivacyError("give --q (Poisson sampling) or both --population and --cohort (fixed size); with --groups, "
                       "their cyclic form")


def _cohort_rule(rule: CohortRule) -> str:
    """How a run's cohorts are chosen, in a few words."""
    from fedpub.privacy.events import (
        CyclicFixedSizeSampling,
        CyclicPoissonSampling,
        EpochBlocks,
        FixedSizeSampling,
        PoissonSampling,
    )

    if isinstance(rule, CyclicPoissonSampling):
        return f"cyclic Poisson, q={rule.sampling_rate:.4g} in one of {rule.groups} groups a round"
    if isinstance(rule, CyclicFixedSizeSampling):
        return (f"cyclic fixed size, {rule.cohort_size} of one of {rule.groups} groups of the {rule.population} "
                f"a round, without replacement")
    if isinstance(rule, PoissonSampling):
        return f"Poisson, q={rule.sampling_rate:.4g}"
    if isinstance(rule, EpochBlocks):
        return f"no sampling: epoch blocks, {rule.rounds_per_epoch} rounds an epoch"
    if isinstance(rule, FixedSizeSampling):
        return f"fixed size, {rule.cohort_size} of {rule.population} without replacement"
    return type(rule).__name__


GROUPS_HELP = "k, for cyclic sampling (Poisson with --q, fixed-size with --population and --cohort)"
SET_HELP = ("override one config key, KEY=VALUE with a dotted KEY (strategy.clip_norm=0.5; VALUE read as YAML: "
            "null, true, 0.5, cuda:1); repeatable, applied in order, recorded in the run's config.yaml")


def _describe_experiment(cfg: ExperimentConfig, experiment: Experiment, backend: str) -> None:
    strategy = experiment.strategy
    console.print(
        f"[bold]{cfg.name}[/]: {strategy.name}, N={strategy.population} private users, "
        f"expected cohort {strategy.expected_cohort:g} ({_cohort_rule(strategy.sampling)}), "
        f"z={experiment.noise_multiplier:.4g}, C={cfg.strategy.clip_norm:g}, {cfg.rounds} rounds, "
        f"device {experiment.device}, backend {backend}",
        highlight=False, soft_wrap=True,
    )
    console.print(f"randomness {experiment.randomness.statement()}", highlight=False, soft_wrap=True)
    console.print(f"evaluated on {experiment.eval_users.label}", highlight=False, soft_wrap=True)


def _dry_run(cfg: ExperimentConfig, experiment: Experiment, run_dir: RunDirectory, fresh: bool) -> None:
    """What ``fedpub run`` would do with this experiment, from its files; nothing is written."""
    from fedpub.config import dump_config
    from fedpub.simulations.run.run_lock import lock_holder
    from fedpub.simulations.run.session import run_changes

    strategy = experiment.strategy
    delta = cfg.privacy.delta
    epsilon = experiment.new_accountant().epsilon_if(experiment.planned_event, delta)
    console.print(
        f"would run {cfg.rounds} rounds: N = {strategy.population}, q = m/N = "
        f"{strategy.expected_cohort / strategy.population:.4g}, m = {strategy.expected_cohort:g}, "
        f"z = {experiment.noise_multiplier:.4g}, planned (ε, δ) = ({epsilon:.4g}, {delta:g}) ({cfg.privacy.accountant})"
        + ("" if experiment.budget_epsilon is None else f", stopping before ε > {experiment.budget_epsilon:g}"),
        highlight=False, soft_wrap=True,
    )
    holder = lock_holder(run_dir.root)
    stored = run_dir.stored_config()
    if holder is not None:
        state = f"in use by {holder}: a run now would be refused"
    elif fresh:
        state = "a new run" + (" (--fresh: its files would be replaced)" if stored is not None else "")
    elif stored is not None and run_changes(stored, dump_config(cfg)):
        state = "holds a different config: refused (another `name`, or --fresh)"
    elif run_dir.holds_finished_run():
        state = "holds this run, finished: nothing to do"
    else:
        state = _resume_state(experiment, run_dir, stored is None)
    console.print(f"{run_dir.root}/: {state}", highlight=False, soft_wrap=True)
    console.print("dry run: nothing written", highlight=False)


def _resume_state(experiment: Experiment, run_dir: RunDirectory, new: bool) -> str:
    """What a run would do with the checkpoint in ``run_dir`` (none: a ``new`` run, or one from round 0): resume
    from it, or refuse it as the run would (a file it cannot read, another config's or model's)."""
    from fedpub.config import dump_config
    from fedpub.models.seeded import model_params
    from fedpub.simulations.run.run_dir import RunDirectoryError
    from fedpub.simulations.run.session import check_checkpoint_config, check_checkpoint_params

    try:
        checkpoint = run_dir.load_checkpoint()
        if checkpoint is None:
            return "a new run" if new else "would resume from round 0"
        check_checkpoint_config(run_dir, checkpoint, dump_config(experiment.config))
        check_checkpoint_params(run_dir, checkpoint["params"], model_params(experiment.new_model()))
    except RunDirectoryError as error:
        return f"refused: {error}"
    return f"would resume from round {checkpoint['rounds_done']}"


def _resume_command(*words: str, torchrun: bool = False) -> str:
    if torchrun:
        nproc = os.environ.get("LOCAL_WORLD_SIZE", "N")
        return shlex.join(["torchrun", f"--nproc-per-node={nproc}", "-m", "fedpub.simulations", *words])
    return shlex.join(["fedpub", *words])


def _say_stopped(run_dir: RunDirectory, rounds_done: int | None, rounds: int) -> None:
    """Where an interrupted run stopped."""
    if rounds_done is None:  # stopped mid-round: the checkpoint on disk says where
        checkpoint = run_dir.load_checkpoint() if run_dir.checkpoint_path.exists() else None
        rounds_done = 0 if checkpoint is None else checkpoint["rounds_done"]
    console.print(
        f"interrupted: {run_dir.root}/ holds {rounds_done} of {rounds} rounds, checkpointed (metrics.jsonl and "
        "ledger.json hold nothing past the checkpoint)", highlight=False, soft_wrap=True,
    )


def _resume_with(resume: str) -> None:
    """How to go on after an interruption; exits 130."""
    console.print(f"resume with: {resume}", highlight=False, soft_wrap=True, markup=False)
    raise typer.Exit(130)


def _stopped(run_dir: RunDirectory, rounds_done: int | None, rounds: int, resume: str) -> None:
    """Where an interrupted run stopped and how to go on; exits 130."""
    _say_stopped(run_dir, rounds_done, rounds)
    _resume_with(resume)


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Argument(help="experiment YAML; omit for the bundled quick-start")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="discard an existing run of the same name")] = False,
    backend: Annotated[str, typer.Option(help=BACKEND_HELP)] = "inprocess",
    tune_allocator: Annotated[bool, typer.Option(
        "--tune-allocator",
        help="in process: make glibc keep freed memory (mallopt: no mmap, no trim) so large cohorts' round "
        "buffers are reused; process-wide for the rest of the run, which keeps its peak memory",
    )] = False,
    overrides: Annotated[Optional[list[str]], typer.Option("--set", metavar="KEY=VALUE", help=SET_HELP)] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="validate the config and build the experiment (data, calibration, budget check), print "
        "what would run, and write no run directory")] = False,
) -> None:
    """Run an experiment and write runs/<name>/ (resumes a checkpointed run). Ctrl-C (or SIGTERM) stops it at
    the end of the round under way, checkpointed, and exits 130. Started by torchrun, its ranks share each round
    (docs/guides/compare.md, "Many workers"); rank 0 writes the run directory and prints.

    CONFIG: the experiment YAML; omit it for the bundled quick-start."""
    from fedpub.simulations.run.backends import check_backend, check_config_for, run_experiment
    from fedpub.simulations.run.distributed import RanksDiverged, WorkerLost, Workers, launched
    from fedpub.simulations.run.engine import CohortsKeepFailing, RunDirectoryError, RunInterrupted
    from fedpub.simulations.run.experiment import build_experiment
    from fedpub.simulations.run.run_dir import RunDirectory
    from fedpub.simulations.run.run_lock import RunDirectoryLocked

    try:
        launch = launched()
        console.quiet = launch is not None and launch.rank != 0
        backend = check_backend(backend, tune_allocator=tune_allocator, torchrun=launch is not None)
    except ValueError as error:
        _fail(error)

    path = config or quickstart_config_path()
    sets = overrides or []
    resume = _resume_command(
        "run", *([str(config)] if config else []), *(w for item in sets for w in ("--set", item)),
        *(["--backend", backend] if backend != "inprocess" else []), *(["--tune-allocator"] if tune_allocator else []),
        torchrun=launch is not None,
    )
    try:
        cfg = load_config(path, sets)
        check_config_for(backend, cfg)
        with console.status("preparing data, model and noise calibration"):
            experiment = build_experiment(cfg)
    except USER_ERRORS as error:
        _fail(error)
    except KeyboardInterrupt:
        console.print("interrupted before the first round: nothing written")
        raise typer.Exit(130) from None
    _describe_experiment(cfg, experiment, backend)
    import torch

    threads = _threads[0] if _threads else choose_threads(os.environ, torch_imported=True)
    console.print(thread_line(threads, torch.get_num_threads()), highlight=False, soft_wrap=True)
    run_dir = RunDirectory(cfg.output_dir / cfg.name)
    if dry_run:
        _dry_run(cfg, experiment, run_dir, fresh)
        return
    metric = experiment.task.headline
    workers = None
    with RoundDisplay(console, cfg.rounds, metric) as display:
        try:
            if launch is not None:
                workers, experiment = Workers.open(launch, experiment)
                if launch.trust_statement() is not None:
                    display.log(f"trust: {launch.trust_statement()}")
            result = run_experiment(
                experiment, backend, fresh=fresh, on_round=display.on_round, tune_allocator=tune_allocator,
                log=display.log, on_resume=display.on_resume, workers=workers,
            )
        except RunInterrupted as stop:
            display.stop()
            _stopped(run_dir, stop.rounds_done, cfg.rounds, resume)
        except KeyboardInterrupt:
            display.stop()
            _stopped(run_dir, None, cfg.rounds, resume)
        except WorkerLost:
            display.stop()
            raise typer.Exit(2) from None  # said on stderr when it happened
        except (RunDirectoryError, RunDirectoryLocked, CohortsKeepFailing, RanksDiverged, *USER_ERRORS) as error:
            display.stop()
            _fail(error)
        finally:
            if workers is not None:
                workers.close()
    figures = (f"final test {metric} [bold]{result.final_metrics[f'eval_{metric}']:.4f}[/] after "
               f"{result.rounds_done} rounds; user-level (ε, δ) = ([bold]{result.epsilon:.4g}[/], {result.delta:g})")
    if result.already_finished:
        console.print(f"{run_dir.root}/ holds this run, finished: nothing to do (--fresh runs it again)",
                      highlight=False, soft_wrap=True)
        console.print(figures, highlight=False, soft_wrap=True)
        console.print(f"results in {run_dir.root}/", highlight=False, soft_wrap=True)
        return
    if result.stopped_by_budget:
        console.print(f"stopped after {result.rounds_done} rounds: the next round would exceed ε = {cfg.privacy.budget_epsilon}")
    console.print(figures, highlight=False)
    diagnostics = ", diagnostics.jsonl (outside the DP guarantee)" if experiment.diagnostics else ""
    console.print(f"results in {run_dir.root}/ (summary.md, metrics.jsonl, ledger.json, accuracy.png{diagnostics})",
                  highlight=False, soft_wrap=True)


@app.command()
def account(
    rounds: Annotated[int, typer.Option("--rounds", "-T", min=1, help="number of rounds T")],
    noise_multiplier: Annotated[float, typer.Option("--noise-multiplier", "-z", min=0.0, help="z = noise std / C")],
    delta: Annotated[float, typer.Option(help="δ")] = 1e-5,
    q: Annotated[Optional[float], typer.Option("--q", help="Poisson sampling rate")] = None,
    population: Annotated[Optional[int], typer.Option(help="N, for fixed-size sampling")] = None,
    cohort: Annotated[Optional[int], typer.Option(help="m, for fixed-size sampling")] = None,
    groups: Annotated[Optional[int], typer.Option(min=1, help=GROUPS_HELP)] = None,
) -> None:
    """User-level ε after T rounds of the sampled Gaussian mechanism, with PLD and RDP."""
    from fedpub.privacy.accountant import cross_check
    import dp_accounting

    from fedpub.privacy.events import neighboring_relation, run_event

    try:
        sampling = _sampling(q, population, cohort, groups)
        event = run_event(sampling, [dp_accounting.GaussianDpEvent(noise_multiplier)], rounds)
        values = cross_check(event, delta, neighboring_relation(sampling))
    except USER_ERRORS as error:
        _fail(error)
    console.print(f"user-level ε at δ={delta:g} after {rounds} rounds, z={noise_multiplier:g}, {sampling}",
                  highlight=False, soft_wrap=True)
    table = Table()
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
    groups: Annotated[Optional[int], typer.Option(min=1, help=GROUPS_HELP)] = None,
) -> None:
    """The smallest noise multiplier z whose ε after T rounds is at most the target (cached)."""
    from fedpub.privacy.calibration import calibrate_noise_multiplier

    if accountant not in ("pld", "rdp"):
        _fail(ValueError(f"--accountant must be pld or rdp, got {accountant!r}"))
    if accountant == "pld" and q is None and (population is not None or cohort is not None):
        _fail(ValueError("fixed-size sampling (--population, --cohort) is accounted by RDP only (replace-one "
                         "neighbours): add --accountant rdp"))
    try:
        z = calibrate_noise_multiplier(target_epsilon, delta, _sampling(q, population, cohort, groups), rounds, accountant=accountant)
    except USER_ERRORS as error:
        _fail(error)
    console.print(f"noise multiplier z = [bold]{z!r}[/] ({accountant.upper()}, ε ≤ {target_epsilon:g}, δ = {delta:g}, T = {rounds})", highlight=False)


def _show_comparison(table: str, out_dir: Path) -> None:
    console.print(Markdown(table))
    console.print(f"results in {out_dir}/ (compare.md, compare.csv, accuracy_vs_epsilon.png, accuracy_vs_round.png)")


@app.command()
def compare(
    sweep: Annotated[Path, typer.Argument(help="sweep YAML: base config, epsilons, seeds, strategies (see docs/guides/compare.md)")],
    fresh: Annotated[bool, typer.Option("--fresh", help="discard recorded results and restart every run")] = False,
    backend: Annotated[str, typer.Option(help=BACKEND_HELP)] = "inprocess",
    overrides: Annotated[Optional[list[str]], typer.Option(
        "--set", metavar="KEY=VALUE", help=SET_HELP.replace("config key", "key of the base config") +
        "; the strategies' overrides, ε, seed and name still apply over it")] = None,
    jobs: Annotated[str, typer.Option(
        "--jobs", "-j", metavar="N|auto",
        help="runs at once (in process only), each in its own worker process with max(1, cores // N) torch threads; "
        "their progress is a line as each starts and ends; 0 or auto: one per core; 1: one after the other, with "
        "the round progress")] = "1",
) -> None:
    """Run every (strategy, ε, seed) of a sweep (resumable) in process or on Flower simulation, then write
    compare.csv, compare.md and the ε–accuracy and round–accuracy plots into <output_dir>/<name>/. Ctrl-C stops
    the runs under way at the end of their round, checkpointed, and exits 130.

    SWEEP: the sweep YAML (base config, epsilons, seeds, strategies; see docs/guides/compare.md)."""
    from fedpub.simulations.run.backends import check_backend
    from fedpub.simulations.tools.compare import SweepInterrupted, load_sweep, run_sweep
    from fedpub.simulations.run.engine import RunInterrupted
    from fedpub.simulations.run.run_dir import RunDirectory
    from fedpub.simulations.run.run_lock import RunDirectoryLocked
    from fedpub.simulations.tools.sweep_jobs import check_jobs, parse_jobs

    sets = overrides or []
    try:
        backend = check_backend(backend)
        at_once = parse_jobs(jobs)
        check_jobs(at_once, backend)
        plan = load_sweep(sweep, sets)
    except USER_ERRORS as error:
        _fail(error)
    resume = _resume_command("compare", str(sweep), *(w for item in sets for w in ("--set", item)),
                             *(["--backend", backend] if backend != "inprocess" else []),
                             *(["--jobs", jobs] if at_once != 1 else []))
    console.print(f"[bold]{plan.name}[/]: {len(plan.runs)} runs into {plan.root}/ (backend {backend})", highlight=False)
    current: list[RunDirectory] = []
    try:
        result = run_sweep(plan, fresh=fresh, console=console, backend=backend, started=current.append, jobs=at_once)
    except RunDirectoryLocked as error:
        _fail(error)
    except RunInterrupted as stop:
        _stopped(stop.run_dir, stop.rounds_done, stop.rounds, resume)
    except SweepInterrupted as stop:
        for run, rounds_done in stop.stopped:
            _say_stopped(run.run_dir, rounds_done, run.config.rounds)
        if stop.not_started:
            console.print(f"runs not started: {stop.not_started}", highlight=False)
        _resume_with(resume)
    except KeyboardInterrupt:
        if not current:
            raise typer.Exit(130) from None
        _stopped(current[-1], None, next(r.config.rounds for r in plan.runs if r.run_dir.root == current[-1].root),
                 resume)
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
    from fedpub.simulations.tools.compare_report import report_runs

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
    Each says the smallest noise error its size detects with 95 % power (worked out from the config, never from
    one run's canaries) and the canaries that detect half the noise, with their run time. Exits 1 when a run's
    verdict is a VIOLATION.

    CONFIG: the experiment YAML to audit."""
    from fedpub.tasks import get_task
    from fedpub.simulations.tools.audit import audit_power_line, check_options, output_names, run_audit
    from fedpub.simulations.run.engine import RunDirectoryError
    from fedpub.simulations.run.run_lock import RunDirectoryLocked

    scales = noise_scale or [1.0]
    try:
        check_options(canaries, scales, observe)
        cfg = load_config(config)
    except USER_ERRORS as error:
        _fail(error)
    metric, results = get_task(cfg.task).headline, []
    for scale in scales:
        with RoundDisplay(console, cfg.rounds, metric, f"noise ×{scale:g}: round") as display:
            try:
                results.append(run_audit(cfg, canaries=canaries, noise_scale=scale, seed=seed, fresh=fresh,
                                         on_round=display.on_round, observe=observe))
            except (RunDirectoryError, RunDirectoryLocked, *USER_ERRORS) as error:
                display.stop()
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
        console.print(f"noise ×{r.noise_scale:g}: {audit_power_line(r)}", highlight=False, soft_wrap=True)
        console.print(f"results in {r.run_dir}/ ({', '.join(output_names(r.observe))})", highlight=False,
                      soft_wrap=True)
    if any(r.verdict != "consistent" for r in results):
        raise typer.Exit(1)  # a pipeline gated on the audit stops here


_threads: list[ThreadChoice] = []
"""What :func:`main` chose for OpenMP before anything imported torch (empty when the app runs without it)."""


def main() -> None:
    """The ``fedpub`` command. An error no command turned into an ``error:`` line (exit 2) is reported in a few
    lines on stderr, its full traceback written to a file, with no local variable and no data (error_report.py),
    and exits 1."""
    _threads.append(apply_thread_choice())  # before any command imports torch
    try:
        app()
    except Exception as error:  # SystemExit (typer.Exit, the end of every command) and KeyboardInterrupt go on
        first, *rest = report_unexpected(error)
        errors.print(f"[bold red]error:[/] {_rank()}{escape(first.removeprefix('error: '))}", highlight=False,
                     soft_wrap=True)
        for line in rest:
            errors.print(line, highlight=False, soft_wrap=True, markup=False)
        raise SystemExit(1) from None

