"""Non-private training on the public users' pooled data, the client-side work of a recipe's run phases
(:mod:`fedpub.run_phases`): warm start (Ganesh et al. 2023, "Why is public pretraining necessary for private model
training?"; PDA-DPMD's Algorithm 1 line 1) pretrains w_0, model reuse (PPSGD, Wang & Zhou 2020, Alg. 1 line 25)
minimises L_pub(w) + λ‖w − w_T‖² from w_T. Public users opted out, so this costs no privacy.

:class:`PooledPublicTrainer` is the :class:`~fedpub.run_phases.PublicTrainer` over fedpub's own data, used by the
run session and, given the public users' data, by a Flower user's own ServerApp.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fedpub.clients.local_training import LocalTrainingConfig, train_client
from fedpub import tree
from fedpub.config import ModelReuseConfig, PublicTrainingConfig
from fedpub.data.base import ClientData, FederatedDataset
from fedpub.seeding import torch_generator
from fedpub.tasks import Task
from fedpub.types import Params


def pooled_data(data: FederatedDataset, client_ids: Sequence[str]) -> ClientData:
    """Every example of ``client_ids`` in one ClientData."""
    parts = [data.client_data(cid) for cid in client_ids]
    return ClientData(torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts]))


def train_on_public(
    model: torch.nn.Module,
    params: Params,
    data: ClientData,
    config: PublicTrainingConfig,
    task: Task,
    *,
    seed: int,
    purpose: str,
) -> tuple[Params, dict[str, float]]:
    """``config.epochs`` of minibatch SGD on ``data`` from ``params`` (with λ‖w − params‖² for a
    ModelReuseConfig); the new parameters and the training metrics."""
    local = LocalTrainingConfig(
        epochs=config.epochs,
        batch_size=config.batch_size,
        lr=config.lr,
        momentum=config.momentum,
        prox_weight=config.prox_weight if isinstance(config, ModelReuseConfig) else 0.0,
    )
    result = train_client(model, params, data, local, torch_generator(seed, purpose), task)
    return tree.add(params, result.update), dict(result.metrics)


class PooledPublicTrainer:
    """The pooled data of the public users ``client_ids`` of ``data`` (read at the first phase that trains), trained
    on ``model`` (its parameters replaced by each call's) for ``task``; each phase draws its minibatches from the
    generator (``seed``, phase), as every backend does."""

    def __init__(
        self, model: torch.nn.Module, data: FederatedDataset, client_ids: Sequence[str], task: Task, seed: int
    ) -> None:
        self.model, self.data, self.client_ids, self.task, self.seed = model, data, list(client_ids), task, seed
        self._pooled: ClientData | None = None

    def train_public(
        self, params: Params, config: PublicTrainingConfig, purpose: str
    ) -> tuple[Params, dict[str, float]]:
        if self._pooled is None:
            self._pooled = pooled_data(self.data, self.client_ids)
        return train_on_public(self.model, params, self._pooled, config, self.task, seed=self.seed, purpose=purpose)
