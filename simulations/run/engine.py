"""The in-process engine: the round loop of docs/design.md §3 in one process.

One resident model trains the whole sampled cohort (:mod:`fedpub.clients.cohort_training`; no per-client process,
no serialisation), each group of users vectorised or user by user, whichever the run's first groups of that size
trained faster (``client.path: auto``; the choices are kept in ``paths.json`` and reused on resume). Each round the
session's :class:`~fedpub.round_driver.RoundDriver` plans the cohorts and payloads, the engine trains them,
and the driver aggregates, prices the round's actual event against the budget and composes it; the
:class:`RunSession` records, evaluates and checkpoints. A run directory with a checkpoint and the same
resolved config is resumed, giving the same final model. With ``data.prefetch`` (on a GPU unless set) the next round's users are read
into the caches in a background thread while the round trains (:meth:`~fedpub.data.cache.CachedClients.read_ahead`).
When the run ends, however it ends, that reading and the noise drawn ahead for a round that will not come
(:mod:`fedpub.noise_prefetch`) are stopped and waited for: no thread of the run outlives it.
A user whose training raises contributes nothing, as a failed Flower node does: it counts in
``cohort_failed``, its error is logged once per round, and the round's noise and DP event stay those
of the sampled cohort. When every sampled user fails ``stop_after_failed_rounds`` rounds in a row the run
stops (:class:`CohortsKeepFailing`), checkpointed.

Stopping (Ctrl-C, SIGTERM, when the engine runs in the main thread): the round under way is finished, recorded
and checkpointed, then :class:`RunInterrupted` is raised, so the directory holds nothing its checkpoint does not.
A second signal stops at once; the records of rounds past the checkpoint on disk are then removed, as they are
after any error. Only SIGKILL (or a power cut) can leave records past the checkpoint: the next run drops them
and redoes those rounds.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fedpub.clients.cohort_training import CohortTrainer
from fedpub.clients.round_training import train_cohorts
from fedpub.data.base import FederatedDataset
from fedpub.data.cache import CachedClients
from fedpub.noise_prefetch import cancel_prefetch
from fedpub.recipe_registry import check_transport
from fedpub.round_driver import CohortsKeepFailing, RoundPlan
from fedpub.strategy import RoundOutcome
from fedpub.types import Params, Updates
from fedpub.simulations.run.experiment import Experiment
from fedpub.simulations.run.memory import keep_freed_memory
from fedpub.simulations.run.run_dir import RunDirectory, RunDirectoryError
from fedpub.simulations.run.session import RunInterrupted, RunResult, RunSession
from fedpub.simulations.run.stop_signals import stop_signals_to

if TYPE_CHECKING:
    from fedpub.simulations.run.distributed import Workers

__all__ = ["CohortsKeepFailing", "RunDirectoryError", "RunInterrupted", "RunResult", "run_in_process"]


class _StopRequest:
    """Set by the first SIGINT/SIGTERM; the second raises KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.signal: str | None = None

    def __call__(self, signum: int, frame: object) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        os.write(2, f"\n{self.signal}: stopping after the round under way (checkpointed); "
                    "send it again to stop at once\n".encode())


def _after_cleanup(signum: int, frame: object) -> None:
    """A stop signal while a failed run cleans up: the run is ending with its error already."""


@contextmanager
def _stop_at_round_end() -> Iterator[_StopRequest]:
    """SIGINT and SIGTERM ask the loop to stop at the end of its round (main thread only: elsewhere signals
    cannot be caught and keep their usual effect)."""
    request = _StopRequest()
    with stop_signals_to(request):
        yield request


def run_in_process(
    experiment: Experiment,
    run_dir: RunDirectory,
    *,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    log: Callable[[str], None] | None = None,
    extra_updates: Callable[[int], list[Updates]] | None = None,
    on_model: Callable[[int, Params, Params], None] | None = None,
    tune_allocator: bool = False,
    on_resume: Callable[[int], None] | None = None,
    workers: Workers | None = None,
) -> RunResult:
    """Run (or resume) ``experiment``, writing every result into ``run_dir``; ``log`` receives one line
    saying how cohorts are trained (vectorised, or the per-client loop and why), and one line for each
    round in which users failed (else those go to the ``fedpub.clients.round_training`` logger). ``extra_updates(t)``
    (an audit's canary users) join round t's private updates: counted in the sampled cohort, clipped
    and noised like them. ``on_model(t, before, after)`` receives round t's global model before and after
    the round, once the round is recorded (an audit's per-round canary statistics). ``tune_allocator`` makes
    glibc keep freed memory, so that each round's update buffers are reused by the next instead of being
    page-faulted in again (:func:`fedpub.simulations.run.memory.keep_freed_memory`): faster for large cohorts, but
    process-wide and for good (the process keeps its peak memory), hence off unless asked for.
    ``on_resume(k)`` is called (and ``log`` told) when a checkpointed run resumes from round k. A run the
    directory holds finished is not run again: its result comes back with ``already_finished``.
    SIGINT/SIGTERM stop the run at the end of its round, checkpointed (:class:`RunInterrupted`). ``workers``: this
    process is one of torchrun's ranks, sharing each round with the others (:mod:`fedpub.simulations.run.distributed`;
    rank 0 alone writes ``run_dir``); every rank returns rank 0's result."""
    check_transport(experiment.config.strategy, "in_process" if workers is None else "distributed")
    if workers is not None and (extra_updates is not None or on_model is not None):
        raise ValueError("extra users and per-round models (an audit) are in process only: run without torchrun")
    if tune_allocator:
        keep_freed_memory()
    session = RunSession(experiment, run_dir, fresh=fresh) if workers is None else workers.session(
        experiment, run_dir, fresh=fresh)
    try:
        if session.finished:
            return session.finished_result()
        if session.resumed_from is not None:
            if log is not None:
                log(f"resuming from round {session.resumed_from} of {experiment.config.rounds} ({run_dir.root})")
            if on_resume is not None:
                on_resume(session.resumed_from)
        if experiment.config.data.preload:
            preload(experiment, log)
        with _stop_at_round_end() as stop:
            return _run_rounds(session, stop, on_round, log, extra_updates, on_model, workers)
    except RunInterrupted:
        raise
    except BaseException:
        with stop_signals_to(_after_cleanup):  # torchrun's SIGTERM (another rank died) would end the process
            session.drop_records_past_checkpoint()  # mid-write, leaving a temporary file: it waits for this
        raise
    finally:
        cancel_prefetch()
        for data in (experiment.train, experiment.public_data):
            if isinstance(data, CachedClients):
                data.close()
        session.close()


def _run_rounds(
    session: RunSession,
    stop: _StopRequest,
    on_round: Callable[[dict[str, Any]], None] | None,
    log: Callable[[str], None] | None,
    extra_updates: Callable[[int], list[Updates]] | None,
    on_model: Callable[[int, Params, Params], None] | None,
    workers: Workers | None,
) -> RunResult:
    """The round loop of :func:`run_in_process`, stopping at a round's end when ``stop`` is set (on any rank, with
    ``workers``). The cohort trainer's path choices are the session's (kept in ``paths.json``, reused when the run
    resumes)."""
    experiment = session.experiment  # a resumed run's noise and cohorts come from its checkpointed privacy seed
    cfg = experiment.config
    trainer = session.cohort_trainer(log=log)
    if log is not None:
        log(trainer.describe())
    prefetch = cfg.data.prefetch == "on" or (cfg.data.prefetch == "auto" and experiment.device.type == "cuda")
    driver = session.driver
    for t in range(session.rounds_done, cfg.rounds):
        asked = stop.signal is not None
        if asked if workers is None else workers.agree_to_stop(asked, session.params, t):
            session.checkpoint_if_started()
            raise RunInterrupted(session.run_dir, session.rounds_done, cfg.rounds)
        if not driver.admit(t):
            break  # past the planned rounds or the budget: nothing of the round is trained or released
        session.start_round()
        plan = driver.plan(t, session.state)
        ahead = ((lambda share: read_ahead(experiment, t + 1, share)) if prefetch and t + 1 < cfg.rounds else None)
        before = session.params
        if workers is None:
            outcome, metrics, examples = _train_round(session, trainer, plan, ahead, log, extra_updates)
        else:
            outcome, metrics, examples = workers.train_round(session, trainer, plan, read_ahead=ahead, log=log)
        if outcome is None:
            break  # the round would exceed the budget: its output is discarded, never released
        record = session.record(t, outcome, metrics, examples)
        if on_model is not None:
            on_model(t, before, session.params)
        if on_round is not None:
            on_round(record)
        del outcome  # the round's user updates (K × the model) must not stay alive while the next cohort trains
    return session.finish()  # a stop asked for during the last round: the run is whole, it finishes


def _train_round(
    session: RunSession,
    trainer: CohortTrainer,
    plan: RoundPlan,
    ahead: Callable[[Any], None] | None,
    log: Callable[[str], None] | None,
    extra_updates: Callable[[int], list[Updates]] | None,
) -> tuple[RoundOutcome | None, list[Mapping[str, float]], int]:
    """Round ``plan`` in this process: its cohorts trained (``ahead()`` starts reading the next round's users),
    the round finished from the replies (None: refused by the budget); its users' training metrics and examples."""
    experiment = session.experiment
    private, public = train_cohorts(
        trainer, experiment.config.seed, plan, experiment.train, experiment.public_data, session.params,
        read=None if ahead is None else lambda: ahead(None), log=log,
    )
    outcome = session.driver.finish(
        plan, session.params, session.state, {cid: r.update for cid, r in private.items()},
        {cid: r.update for cid, r in public.items()}, extra=extra_updates(plan.round) if extra_updates else (),
    )
    results = list(private.values())
    return outcome, [r.metrics for r in results], sum(r.num_examples for r in results)


def preload(experiment: Experiment, log: Callable[[str], None] | None = None) -> None:
    """``data.preload``: every private and public user read into its cache before the first round."""
    pools = ((experiment.train, experiment.private_ids), (experiment.public_data, experiment.public_ids))
    for data, _ in pools:
        if not isinstance(data, CachedClients):
            raise ValueError(f"data.preload: the users of {type(data).__name__} are not read through a cache")
    for cache, ids in _per_cache(pools):
        cache.preload(ids, log)


def read_ahead(
    experiment: Experiment,
    round_index: int,
    share: Callable[[Sequence[str], FederatedDataset], Sequence[str]] | None = None,
) -> None:
    """Start reading round ``round_index``'s private and public users (``share``: the users this process trains
    among a cohort of a dataset's) into their caches in the background (the cohorts depend only on the seed and the
    round); a cache reading both gets both lists in one batch, after it has finished the last one."""
    strategy = experiment.strategy
    mine = share or (lambda ids, _: ids)
    for cache, ids in _per_cache((
        (experiment.train, mine(strategy.sample_cohort(experiment.private_ids, round_index), experiment.train)),
        (experiment.public_data, mine(strategy.sample_public_cohort(experiment.public_ids, round_index),
                                      experiment.public_data)),
    )):
        cache.read_ahead(ids)


def _per_cache(pools: Iterable[tuple[object, Sequence[str]]]) -> list[tuple[CachedClients, list[str]]]:
    """The user ids of ``pools`` (a dataset and ids each) gathered per distinct cache: one list for a cache that
    holds both the private and the public users; datasets read without a cache are left out."""
    gathered: dict[int, tuple[CachedClients, list[str]]] = {}
    for data, ids in pools:
        if isinstance(data, CachedClients):
            gathered.setdefault(id(data), (data, []))[1].extend(ids)
    return list(gathered.values())
