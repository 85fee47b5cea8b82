"""Several runs of a sweep at once (``fedpub compare --jobs N``), each in a worker process of its own.

A :class:`~concurrent.futures.ProcessPoolExecutor` of N ``spawn``-ed workers (torch and ``fork`` do not mix) runs
the in-process engine, one run per worker process (a fresh process, importing torch, for each run: a few seconds),
each with ``max(1, cores // N)`` torch threads, cores being the CPUs this process may run on. A run is fully
determined by its config and seed, so it computes what it would in the sweep's own process with that many threads
(float32 sums over another number of threads round differently in the last bits).

Stopping: the workers run in sessions of their own, so a terminal's Ctrl-C reaches the sweep process only. Its
SIGINT/SIGTERM handler starts no further run and asks every run under way to stop: each worker signals itself
(the same signal), and the engine finishes the round under way, checkpoints and stops; a second signal stops them
at once, as it does a single run. A worker whose sweep process died (SIGKILL) stops its run the same way. A worker
that dies (killed, out of memory) breaks the pool, which stops the others (SIGTERM: checkpointed): the runs under
way are reported failed, and the rest go on in a new pool.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from fedpub.config import ExperimentConfig
from fedpub.simulations.run.stop_signals import stop_signals_to

AUTO = 0
"""``--jobs 0`` or ``auto``: one run per core, at most as many as there are runs to do."""
POLL_S = 0.2
"""How often a worker looks for a stop request and for its sweep process."""


def parse_jobs(text: str) -> int:
    """``--jobs``: a count of runs at once, or ``auto`` (and 0) for :data:`AUTO`; a ValueError says what is allowed."""
    if text.strip().lower() == "auto":
        return AUTO
    try:
        jobs = int(text)
    except ValueError:
        jobs = -1
    if jobs < 0:
        raise ValueError(f"--jobs must be a number of runs at once (1: one after the other) or auto, got {text!r}")
    return jobs


def check_jobs(jobs: int, backend: str) -> None:
    """Refuse running several runs at once on Flower simulation (ValueError)."""
    if jobs != 1 and backend != "inprocess":
        raise ValueError(
            f"--jobs {'auto' if jobs == AUTO else jobs} runs several in-process runs at once; on backend "
            f"{backend!r} each run already spreads over the machine (Ray runs its clients in parallel): drop --jobs "
            "or use --backend inprocess"
        )


def available_cores() -> int:
    """The CPUs this process may run on (its affinity where the system has one, else the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def resolve_jobs(jobs: int, runs: int) -> int:
    """How many runs go at once: ``jobs``, or for :data:`AUTO` one per core and at most ``runs`` (at least 1)."""
    return max(1, min(runs, available_cores())) if jobs == AUTO else jobs


def threads_per_job(jobs: int) -> int:
    """The torch threads of each of ``jobs`` runs at once: the cores shared out, at least one."""
    return max(1, available_cores() // jobs)


@dataclass(frozen=True)
class JobOutcome:
    """How one run ended in its worker."""

    index: int
    status: Literal["finished", "failed", "interrupted"]
    seconds: float
    final_metrics: dict[str, Any] = field(default_factory=dict)
    epsilon: float = float("nan")
    rounds_done: int | None = None
    """Finished: the rounds run; interrupted: the checkpoint's, or None when stopped mid-round (read the checkpoint)."""
    error_kind: str = ""
    error: str = ""


# --- in the worker processes -------------------------------------------------------------------------------------

_busy = threading.Event()
"""Set while the worker runs a job: only then is a stop request turned into a signal."""
_signal_lock = threading.Lock()
_stops: Any = None
"""The sweep process's stop requests (``[count, signal]``, shared memory: a worker gets it when it starts)."""


def _init_worker(stops: Any, parent: int) -> None:
    """Leave the terminal's session (its Ctrl-C is the sweep process's to pass on) and start the thread that passes
    stop requests on."""
    global _stops
    _stops = stops
    os.setsid()
    threading.Thread(target=_watch, args=(stops, parent), daemon=True, name="stop-requests").start()


def _watch(stops: Any, parent: int) -> None:
    """Signal this process once per stop request (``stops``: count, signal) while a job runs; when the sweep process
    is gone, stop the job as SIGTERM would, or exit when there is none."""
    delivered = 0
    while True:
        time.sleep(POLL_S)
        orphaned = os.getppid() != parent
        with _signal_lock:
            if not _busy.is_set():
                if orphaned:
                    os._exit(1)
                continue
            wanted = max(stops[0], 1) if orphaned else stops[0]
            if delivered < wanted:
                delivered += 1
                os.kill(os.getpid(), stops[1] or signal.SIGTERM)


def _run_job(index: int, config: ExperimentConfig, fresh: bool, threads: int) -> JobOutcome:
    """Run (or resume) one run in process with ``threads`` torch threads; its outcome, never an exception (a stop
    is an ``interrupted`` outcome). Outside the engine's round loop SIGTERM acts as SIGINT: a KeyboardInterrupt."""
    import torch

    from fedpub.simulations.run.backends import run_experiment
    from fedpub.simulations.run.experiment import build_experiment
    from fedpub.simulations.run.session import RunInterrupted

    began = time.perf_counter()
    if _stops[0]:  # asked to stop before it started
        return JobOutcome(index, "interrupted", 0.0)
    torch.set_num_threads(threads)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    _busy.set()
    try:
        result = run_experiment(build_experiment(config), "inprocess", fresh=fresh)
    except RunInterrupted as stop:
        return JobOutcome(index, "interrupted", time.perf_counter() - began, rounds_done=stop.rounds_done)
    except KeyboardInterrupt:
        return JobOutcome(index, "interrupted", time.perf_counter() - began)
    except Exception as error:  # noqa: BLE001 — reported as the run's failure, the sweep goes on
        return JobOutcome(index, "failed", time.perf_counter() - began, error_kind=type(error).__name__,
                          error=str(error))
    finally:
        with _signal_lock:
            _busy.clear()
    return JobOutcome(index, "finished", time.perf_counter() - began, dict(result.final_metrics), result.epsilon,
                      result.rounds_done)


# --- in the sweep process ----------------------------------------------------------------------------------------


@contextmanager
def _passing_stops_on(stops: Any, running: Callable[[], int]) -> Iterator[None]:
    """While in the block, SIGINT/SIGTERM count a stop request in ``stops`` (main thread only: elsewhere signals
    keep their usual effect)."""
    def request(signum: int, frame: object) -> None:
        stops[1], stops[0] = signum, stops[0] + 1
        what = "stopping the runs under way at once" if stops[0] > 1 else (
            f"no further run starts; the runs under way ({running()}) stop after their round (checkpointed); send it "
            "again to stop them at once")
        os.write(2, f"\n{signal.Signals(signum).name}: {what}\n".encode())

    with stop_signals_to(request):
        yield


def _outcome(future: Future, index: int) -> JobOutcome:
    """The job's outcome; a worker that died, one stopped between its run and its reply, or an error in the pool, said
    as such."""
    try:
        return future.result()
    except BrokenProcessPool:
        return JobOutcome(index, "failed", 0.0, error_kind="BrokenProcessPool", error=(
            "a worker process ended abruptly (killed, out of memory?): the runs under way were stopped, checkpointed; "
            "run the sweep again to resume them"))
    except KeyboardInterrupt:
        return JobOutcome(index, "interrupted", 0.0)
    except Exception as error:  # noqa: BLE001 — e.g. a config that could not be sent: that run's failure
        return JobOutcome(index, "failed", 0.0, error_kind=type(error).__name__, error=str(error))


def run_jobs(
    configs: Sequence[ExperimentConfig],
    jobs: int,
    *,
    fresh: bool = False,
    started: Callable[[int], None],
    ended: Callable[[JobOutcome], None],
) -> bool:
    """Run ``configs`` in process, up to ``jobs`` at once, in order, each in a fresh worker process with
    :func:`threads_per_job` torch threads; ``started(i)`` as config i is handed to a worker, ``ended(outcome)`` as
    each ends (in finishing order). A SIGINT/SIGTERM starts no further run and stops those under way at their round's
    end. Returns whether it was stopped so; every worker has exited when it returns."""
    context = multiprocessing.get_context("spawn")
    stops = context.RawArray("i", 2)  # [stop requests, their signal]; plain ints, written by a signal handler
    queue = list(enumerate(configs))
    running: dict[Future, int] = {}
    with _passing_stops_on(stops, lambda: len(running)):
        while queue and not stops[0]:
            # one run per worker process: each run starts clean, and a worker the pool stops (when another one died)
            # ends with its run instead of waiting for a next one that never comes
            pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker,
                                       initargs=(stops, os.getpid()), max_tasks_per_child=1)
            try:
                _drain(pool, queue, running, jobs, fresh, stops, started, ended)
            except BaseException:
                stops[0] += 1  # an error here (or a KeyboardInterrupt): stop the runs under way, checkpointed
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
    return bool(stops[0])


def _drain(
    pool: ProcessPoolExecutor,
    queue: list[tuple[int, ExperimentConfig]],
    running: dict[Future, int],
    jobs: int,
    fresh: bool,
    stops: Any,
    started: Callable[[int], None],
    ended: Callable[[JobOutcome], None],
) -> None:
    """Hand ``queue``'s configs to ``pool``, ``jobs`` at a time, until it is empty, stopped, or the pool breaks (a
    worker died: the pool stops the others, and every run it held ends as failed; the rest wait for a new pool)."""
    broken = False
    while running or (queue and not stops[0] and not broken):
        while queue and len(running) < jobs and not stops[0] and not broken:
            try:
                future = pool.submit(_run_job, queue[0][0], queue[0][1], fresh, threads_per_job(jobs))
            except BrokenProcessPool:
                broken = True
                break
            index, _ = queue.pop(0)
            running[future] = index
            started(index)
        if not running:
            break
        finished, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in sorted(finished, key=running.__getitem__):
            broken = broken or isinstance(future.exception(), BrokenProcessPool)
            ended(_outcome(future, running.pop(future)))
