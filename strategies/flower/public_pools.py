"""Public users the server holds and trains itself (a recipe's public cohort without public nodes): the
:class:`PublicPool` protocol, one built from a user's own train function (:class:`TrainFnPool`), and the pooled
public training of the run phases from one (:class:`TrainFnPublicTrainer`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from fedpub.config import PublicTrainingConfig
from fedpub.round_driver import RoundPlan
from fedpub.types import Params, Updates
from fedpub.strategies.flower.replies import model_mismatch


class PublicPool(Protocol):
    """Public users the server holds and trains itself: their ids, and ``train`` giving the round's public cohort
    their updates Δ = w_local − ``params`` (the model's names and shapes). :class:`TrainFnPool` builds one from a
    Flower user's own training function; fedpub's own ServerApp uses
    :class:`fedpub.clients.round_training.ServerPublicPool`."""

    client_ids: Sequence[str]

    def train(self, params: Params, plan: RoundPlan) -> Mapping[str, Updates]:
        """The updates of ``plan.public_cohort`` trained from ``params`` (with ``plan.public_payloads``)."""
        ...


TrainFn = Callable[[dict[str, torch.Tensor], Any], Mapping[str, torch.Tensor]]
"""A user's training function: (the global model's weights, one public user's data) → the trained weights."""


class TrainFnPool:
    """A server-held public pool from the user's own training function and the public users' data on the server:
    ``train_fn(weights, data[user])`` returns the weights after local training from ``weights`` (a fresh copy of
    the global model's state dict; bind the learning rate and epochs with ``functools.partial``), as a standard
    ClientApp would reply them; the pool turns them into the update. ``data``: public user id → that user's data,
    whatever ``train_fn`` takes (a DataLoader, tensors). A pool cannot apply client payloads (a strategy that sends
    its public users one, such as AdaDPS's client-side preconditioner from side information, refuses it)."""

    def __init__(self, train_fn: TrainFn, data: Mapping[str, Any]) -> None:
        if not data:
            raise ValueError("a public pool needs at least one public user's data")
        self.train_fn = train_fn
        self.data = {str(c): d for c, d in data.items()}
        self.client_ids: list[str] = list(self.data)

    def train(self, params: Params, plan: RoundPlan) -> dict[str, Updates]:
        updates = {}
        for cid in plan.public_cohort:
            new = self.train_fn({k: v.detach().clone() for k, v in params.items()}, self.data[cid])
            if new.keys() != params.keys() or any(new[k].shape != params[k].shape for k in params):
                raise ValueError(
                    f"the train function returned weights for public user {cid} that do not have the model's names "
                    f"and shapes (got {sorted(new.keys())[:5]}): it must return the trained model's state dict"
                )
            updates[cid] = {k: new[k].detach().to(params[k].dtype) - params[k] for k in params}
        return updates


PooledTrainFn = Callable[[dict[str, torch.Tensor], PublicTrainingConfig], Mapping[str, torch.Tensor]]
"""A user's training on the pooled public data: (the model's weights, a phase's section: epochs, batch size, lr,
momentum and, for model reuse, ``prox_weight`` λ of λ‖w − the given weights‖²) → the trained weights."""


class TrainFnPublicTrainer:
    """The run phases' public trainer (:class:`~fedpub.run_phases.PublicTrainer`: warm start, model reuse) from the
    user's own ``train_fn`` over the public users' pooled data on the server; it reports no training metrics."""

    def __init__(self, train_fn: PooledTrainFn) -> None:
        self.train_fn = train_fn

    def train_public(
        self, params: Params, config: PublicTrainingConfig, purpose: str
    ) -> tuple[Params, dict[str, float]]:
        new = self.train_fn({k: v.detach().clone() for k, v in params.items()}, config)
        mismatch = model_mismatch(new, params)
        if mismatch is not None:
            raise ValueError(f"the pooled train function returned weights ({purpose}) that do not fit the model: "
                             f"{mismatch}; it must return the trained model's state dict")
        return {k: new[k].detach().to(params[k].dtype) for k in params}, {}
