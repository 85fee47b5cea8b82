"""Training a round's planned cohort on one resident model: the in-process engine's private and public users,
and the public pool a Flower ServerApp holds and trains itself (docs/design.md §6).

Each user trains with the generator every backend gives it, (seed, round, purpose, user), purpose ``client``
for a private user and ``public_client`` for a public one, and with the payloads the round's plan sends it
(:mod:`fedpub.payloads`, e.g. AdaDPS's local preconditioner): a Flower node training the same user from the same
model replies the same update. A user whose training raises contributes nothing; its error is logged once per round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fedpub.clients.cohort_training import CohortTrainer
from fedpub.clients.local_training import ClientFailure, ClientResult
from fedpub.data.base import ClientData, FederatedDataset
from fedpub.noise_prefetch import core_left_for_draws
from fedpub.round_driver import RoundPlan
from fedpub.seeding import torch_generator
from fedpub.types import Params, Updates

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


def train_users(
    trainer: CohortTrainer,
    seed: int,
    plan: RoundPlan,
    datas: Sequence[ClientData],
    params: Params,
    *,
    public: bool,
    log: Callable[[str], None] | None = None,
) -> dict[str, ClientResult]:
    """Train the plan's private (or public) cohort, whose data is ``datas``, from ``params``, each user with the
    generator every backend gives it (seed, round, purpose, user); returns the results of the users whose
    training did not raise (the others are logged once, in one line)."""
    ids = plan.public_cohort if public else plan.private_cohort
    purpose = "public_client" if public else "client"
    trained = trainer.train(
        params,
        datas,
        [torch_generator(seed, plan.round, purpose, cid) for cid in ids],
        payloads=plan.payloads(public),
        sparse_updates=not public,  # the private updates go only to the rows of the clip and sum
    )
    failures = [r for r in trained if isinstance(r, ClientFailure)]
    if failures:
        (log or _logger.warning)(failure_line(plan.round, "public" if public else "private", failures, len(trained)))
    return {cid: r for cid, r in zip(ids, trained, strict=True) if isinstance(r, ClientResult)}


def train_cohorts(
    trainer: CohortTrainer,
    seed: int,
    plan: RoundPlan,
    train: FederatedDataset,
    public_data: FederatedDataset,
    params: Params,
    *,
    read: Callable[[], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[dict[str, ClientResult], dict[str, ClientResult]]:
    """The plan's private and public cohorts read and trained (:func:`train_users`), leaving a core to the next
    round's noise drawn in the background (:func:`~fedpub.noise_prefetch.core_left_for_draws`); ``read()`` is called
    once this round's users are read (to start reading the next round's). Returns (private, public) results."""
    private_data = [train.client_data(cid) for cid in plan.private_cohort]
    public_rows = [public_data.client_data(cid) for cid in plan.public_cohort]
    if read is not None:
        read()
    with core_left_for_draws():
        private = train_users(trainer, seed, plan, private_data, params, public=False, log=log)
        public = train_users(trainer, seed, plan, public_rows, params, public=True, log=log)
    return private, public


@dataclass
class ServerPublicPool:
    """Public users whose data the server holds and trains itself, as the in-process engine does: the default
    way a Flower ServerApp gets a round's public updates (the other: public users as their own nodes).
    ``data`` reads the users of ``client_ids``; ``seed`` is the run's."""

    trainer: CohortTrainer
    data: FederatedDataset
    client_ids: Sequence[str]
    seed: int
    log: Callable[[str], None] | None = None

    def train(self, params: Params, plan: RoundPlan) -> Mapping[str, Updates]:
        """The updates of the plan's public cohort trained from ``params`` (users whose training raised: none)."""
        datas = [self.data.client_data(cid) for cid in plan.public_cohort]
        results = train_users(self.trainer, self.seed, plan, datas, params, public=True, log=self.log)
        return {cid: dict(r.update) for cid, r in results.items()}
