"""The in-process engine: the round loop of DESIGN.md §3 in one process.

One resident model trains the whole sampled cohort, vectorised when the model allows it and user by
user otherwise (:mod:`clients.cohort_training`; no per-client process, no serialisation). Each round the
session's :class:`~fedpub.round_driver.RoundDriver` plans the cohorts and payloads, the engine trains them,
and the driver aggregates, prices the round's actual event against the budget and composes it; the
:class:`RunSession` records, evaluates and checkpoints. A run directory with a checkpoint and the same
resolved config is resumed, giving the same final model. With ``data.prefetch`` (on a GPU unless set) the next round's users are read
into the caches in a background thread while the round trains (:meth:`~fedpub.data.cache.CachedClients.read_ahead`).
A user whose training raises contributes nothing, as a failed Flower node does: it counts in
``cohort_failed``, its error is logged once per round, and the round's noise and DP event stay those
of the sampled cohort. When every sampled user fails ``stop_after_failed_rounds`` rounds in a row the run
stops (:class:`CohortsKeepFailing`), checkpointed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clients.round_training import train_users
from fedpub.data.cache import CachedClients
from fedpub.round_driver import CohortsKeepFailing
from fedpub.types import Params, Updates
from simulations.experiment import Experiment
from simulations.memory import keep_freed_memory
from simulations.run_dir import RunDirectory
from simulations.session import RunDirectoryError, RunResult, RunSession

__all__ = ["CohortsKeepFailing", "RunDirectoryError", "RunResult", "run_in_process"]


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
) -> RunResult:
    """Run (or resume) ``experiment``, writing every result into ``run_dir``; ``log`` receives one line
    saying how cohorts are trained (vectorised, or the per-client loop and why), and one line for each
    round in which users failed (else those go to the ``clients.round_training`` logger). ``extra_updates(t)``
    (an audit's canary users) join round t's private updates: counted in the sampled cohort, clipped
    and noised like them. ``on_model(t, before, after)`` receives round t's global model before and after
    the round, once the round is recorded (an audit's per-round canary statistics). ``tune_allocator`` makes
    glibc keep freed memory, so that each round's update buffers are reused by the next instead of being
    page-faulted in again (:func:`simulations.memory.keep_freed_memory`): faster for large cohorts, but
    process-wide and for good (the process keeps its peak memory), hence off unless asked for."""
    if tune_allocator:
        keep_freed_memory()
    cfg = experiment.config
    session = RunSession(experiment, run_dir, fresh=fresh)
    experiment = session.experiment  # a resumed run's noise and cohorts come from its checkpointed privacy seed
    trainer = experiment.cohort_trainer(session.model)
    if log is not None:
        log(trainer.describe())
    prefetch = cfg.data.prefetch == "on" or (cfg.data.prefetch == "auto" and experiment.device.type == "cuda")
    driver = session.driver
    for t in range(session.rounds_done, cfg.rounds):
        session.start_round()
        plan = driver.plan(t, session.state)
        private_data = [experiment.train.client_data(cid) for cid in plan.private_cohort]
        public_data = [experiment.public_data.client_data(cid) for cid in plan.public_cohort]
        if prefetch and t + 1 < cfg.rounds:
            read_ahead(experiment, t + 1)
        before = session.params
        private = train_users(trainer, cfg.seed, plan, private_data, session.params, public=False, log=log)
        public = train_users(trainer, cfg.seed, plan, public_data, session.params, public=True, log=log)
        outcome = driver.finish(
            plan, session.params, session.state, {cid: r.update for cid, r in private.items()},
            {cid: r.update for cid, r in public.items()}, extra=extra_updates(t) if extra_updates else (),
        )
        if outcome is None:
            break  # the round would exceed the budget: its output is discarded, never released
        results = list(private.values())
        record = session.record(t, outcome, [r.metrics for r in results], sum(r.num_examples for r in results))
        if on_model is not None:
            on_model(t, before, session.params)
        if on_round is not None:
            on_round(record)
        # the round's user updates (K × the model) must not stay alive while the next cohort trains
        del private, public, results, outcome, private_data, public_data
    return session.finish()


def read_ahead(experiment: Experiment, round_index: int) -> None:
    """Start reading round ``round_index``'s private and public users into their caches in the background (the
    cohorts depend only on the seed and the round); a cache reading both gets both lists in one batch, after it
    has finished the last one."""
    strategy = experiment.strategy
    batches: dict[int, tuple[CachedClients, list[str]]] = {}
    for data, ids in (
        (experiment.train, strategy.sample_cohort(experiment.private_ids, round_index)),
        (experiment.public_data, strategy.sample_public_cohort(experiment.public_ids, round_index)),
    ):
        if isinstance(data, CachedClients):
            batches.setdefault(id(data), (data, []))[1].extend(ids)
    for data, ids in batches.values():
        data.read_ahead(ids)
