"""The backends one experiment can run on, behind one call: ``inprocess`` (the engine, fastest), ``flower``
(Flower's Simulation Engine: a virtual SuperNode per user, the same ServerApp and ClientApp as a deployment) and
``secagg`` (Flower's Simulation Engine with SecAgg+: each node runs the recipe's per-user maps and the server sees
only the cohort's sum, :mod:`fedpub.simulations.flower.secagg_dp`). All run the same round driver and write the
same run directory (docs/design.md §6)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, get_args

from fedpub.config import ExperimentConfig
from fedpub.simulations.flower.secagg_dp import RunOptions, SecAggRound, check_supported, run_secagg_simulation
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import Experiment
from fedpub.simulations.flower.server_app import simulated_nodes
from fedpub.simulations.flower.simulation import run_flower_simulation
from fedpub.simulations.run.run_dir import RunDirectory
from fedpub.simulations.run.session import RunResult

if TYPE_CHECKING:
    from fedpub.simulations.run.distributed import Workers

Backend = Literal["inprocess", "flower", "secagg"]
BACKENDS: tuple[str, ...] = get_args(Backend)


def check_backend(backend: str, *, tune_allocator: bool = False, torchrun: bool = False) -> Backend:
    """``backend`` if it is one of :data:`BACKENDS` and can honour the options (``torchrun``: started as one of
    torchrun's ranks), else a ValueError saying why."""
    if backend not in BACKENDS:
        raise ValueError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if torchrun and backend != "inprocess":
        raise ValueError(
            f"torchrun shares the in-process round among its ranks; backend {backend!r} runs its clients in its own "
            "processes: use --backend inprocess under torchrun, or run the Flower backend without torchrun"
        )
    if tune_allocator and backend != "inprocess":
        raise ValueError(
            f"--tune-allocator tunes the in-process engine's allocator; backend {backend!r} trains in other "
            "processes: drop the option or use --backend inprocess"
        )
    return backend  # type: ignore[return-value]


def check_config_for(backend: Backend, config: ExperimentConfig) -> None:
    """Refuse, naming the field, what ``backend`` cannot run of ``config`` (SecAgg+: a part whose per-user map no
    device runs, Poisson cohorts, an infinite clip norm, ``data.preload``; torchrun's ranks: OpenDP's noise), before
    any data is read."""
    if backend == "secagg":
        check_supported(config)
    from fedpub.simulations.run.distributed import launched

    if config.privacy.noise_sampler == "opendp" and launched() is not None:
        # every rank draws the round's noise itself (distributed.py): from OpenDP, which reads the OS's randomness,
        # each would add other noise and the ranks' models would part after round 0
        raise ValueError("privacy.noise_sampler `opendp` draws from each process's own OS randomness, so torchrun's "
                         "ranks would add different noise: use privacy.noise_sampler: torch under torchrun, or run "
                         "the OpenDP sampler in one process")


def run_experiment(
    experiment: Experiment,
    backend: Backend,
    *,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    log: Callable[[str], None] | None = None,
    tune_allocator: bool = False,
    on_resume: Callable[[int], None] | None = None,
    workers: Workers | None = None,
) -> RunResult:
    """Run (or resume) ``experiment`` on ``backend`` into ``<output_dir>/<name>/``; ``log`` receives the engine's
    lines (how cohorts train, failed users) in process. ``tune_allocator`` (in process only: Flower's clients
    run in Ray's worker processes) is :func:`fedpub.simulations.run.engine.run_in_process`'s, and so is ``on_resume`` (on Flower the
    ServerApp logs the round it resumes from); ``workers``: this process is one of torchrun's ranks
    (:mod:`fedpub.simulations.run.distributed`)."""
    config = experiment.config
    check_backend(backend, tune_allocator=tune_allocator, torchrun=workers is not None)
    if backend == "secagg":
        def report(outcome: SecAggRound) -> None:
            if on_round is not None:
                on_round(outcome.record)

        return run_secagg_simulation(config, RunOptions(fresh=fresh, on_round=report), experiment)
    if backend == "flower":
        return run_flower_simulation(config, simulated_nodes(experiment), fresh=fresh, on_round=on_round)
    return run_in_process(
        experiment, RunDirectory(config.output_dir / config.name), fresh=fresh, on_round=on_round, log=log,
        tune_allocator=tune_allocator, on_resume=on_resume, workers=workers,
    )
