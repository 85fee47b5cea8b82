"""The in-process engine: the round loop of DESIGN.md §3 in one process.

One resident model trains the whole sampled cohort, vectorised when the model allows it and user by
user otherwise (:mod:`clients.cohort_training`; no per-client process, no serialisation). Each round:
sample the private cohort (Poisson), train, aggregate privately through the strategy core, stop before
the privacy budget would be exceeded, compose the round's DP event; the :class:`RunSession` records,
evaluates and checkpoints. A run directory with a checkpoint and the same resolved config is resumed,
giving the same final model. With ``data.prefetch`` (on a GPU unless set) the next round's users are read
into the caches in a background thread while the round trains (:meth:`~fedpub.data.cache.CachedClients.read_ahead`).
A user whose training raises contributes nothing, as a failed Flower node does: it counts in
``cohort_failed``, its error is logged once per round, and the round's noise and DP event stay those
of the sampled cohort. When every sampled user fails ``stop_after_failed_rounds`` rounds in a row the run
stops (:class:`CohortsKeepFailing`), checkpointed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from clients.cohort_training import CohortTrainer
from clients.local_training import ClientFailure, ClientResult
from fedpub.data.base import ClientData
from fedpub.data.cache import CachedClients
from fedpub.memory import keep_freed_memory
from fedpub.seeding import torch_generator
from fedpub.types import Params, Updates
from simulations.experiment import Experiment
from simulations.run_dir import RunDirectory
from simulations.session import CohortsKeepFailing, RunDirectoryError, RunResult, RunSession

__all__ = ["CohortsKeepFailing", "RunDirectoryError", "RunResult", "run_in_process"]

_logger = logging.getLogger(__name__)
SHOWN_ERRORS = 3
"""Distinct errors quoted in a round's failure line."""


def failure_line(round_index: int, who: str, failures: Sequence[ClientFailure], trained: int) -> str:
    """One log line for the ``who`` users of a round whose training raised, quoting the distinct errors."""
    errors = list(dict.fromkeys(f.error for f in failures))
    more = f"; {len(errors) - SHOWN_ERRORS} other errors" if len(errors) > SHOWN_ERRORS else ""
    return (
        f"round {round_index}: {len(failures)} of {trained} {who} users failed and contribute nothing "
        f"(noise and ε stay those of the sampled cohort): {'; '.join(errors[:SHOWN_ERRORS])}{more}"
    )


def run_in_process(
    experiment: Experiment,
    run_dir: RunDirectory,
    *,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    log: Callable[[str], None] | None = None,
    extra_updates: Callable[[int], list[Updates]] | None = None,
    on_model: Callable[[int, Params, Params], None] | None = None,
) -> RunResult:
    """Run (or resume) ``experiment``, writing every result into ``run_dir``; ``log`` receives one line
    saying how cohorts are trained (vectorised, or the per-client loop and why), and one line for each
    round in which users failed (else those go to the ``simulations.engine`` logger). ``extra_updates(t)``
    (an audit's canary users) join round t's private updates: counted in the sampled cohort, clipped
    and noised like them. ``on_model(t, before, after)`` receives round t's global model before and after
    the round, once the round is recorded (an audit's per-round canary statistics)."""
    keep_freed_memory()  # each round's update buffers are reused by the next, not page-faulted in again
    cfg = experiment.config
    session = RunSession(experiment, run_dir, fresh=fresh)
    strategy = experiment.strategy
    trainer = CohortTrainer(
        session.model, experiment.local_training, experiment.task, vectorise=cfg.client.vectorise,
        min_users=cfg.client.vectorise_min_users,
    )
    if log is not None:
        log(trainer.describe())
    prefetch = cfg.data.prefetch == "on" or (cfg.data.prefetch == "auto" and experiment.device.type == "cuda")
    stopped_by_budget = False
    for t in range(session.rounds_done, cfg.rounds):
        session.start_round()
        def train_cohort(ids: list[str], datas: list[ClientData], purpose: str) -> list[ClientResult]:
            trained = trainer.train(
                session.params,
                datas,
                [torch_generator(cfg.seed, t, purpose, cid) for cid in ids],
                preconditioner=strategy.local_preconditioner(session.state, public=purpose == "public_client"),
                sparse_updates=purpose == "client",  # the private updates go only to the rows of the clip and sum
            )
            failures = [r for r in trained if isinstance(r, ClientFailure)]
            if failures:
                who = "public" if purpose == "public_client" else "private"
                (log or _logger.warning)(failure_line(t, who, failures, len(trained)))
            return [r for r in trained if isinstance(r, ClientResult)]

        before = session.params
        cohort = strategy.sample_cohort(experiment.private_ids, t)
        public_cohort = strategy.sample_public_cohort(experiment.public_ids, t)
        private_data = [experiment.train.client_data(cid) for cid in cohort]
        public_data = [experiment.public_data.client_data(cid) for cid in public_cohort]
        if prefetch and t + 1 < cfg.rounds:
            read_ahead(experiment, t + 1)
        results = train_cohort(cohort, private_data, "client")
        public_results = train_cohort(public_cohort, public_data, "public_client")
        extra = extra_updates(t) if extra_updates is not None else []
        outcome = strategy.aggregate(
            session.params, [r.update for r in results] + extra, session.state, t,
            sampled=len(cohort) + len(extra), public_updates=[r.update for r in public_results],
        )
        if session.exceeds_budget(outcome.event):
            stopped_by_budget = True  # the round's output is discarded, never released
            break
        session.accountant.compose(outcome.event)
        record = session.record(t, outcome, [r.metrics for r in results], sum(r.num_examples for r in results))
        if on_model is not None:
            on_model(t, before, session.params)
        if on_round is not None:
            on_round(record)
        # the round's user updates (K × the model) must not stay alive while the next cohort trains
        del results, public_results, extra, outcome, private_data, public_data
    return session.finish(stopped_by_budget)


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
