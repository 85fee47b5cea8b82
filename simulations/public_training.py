"""Non-private training at the server on the public users' pooled data. Public users opted out,
so this costs no privacy. Two uses:

- warm start (Ganesh et al. 2023, "Why is public pretraining necessary for private model
  training?"; also seeds 000 and 002): pretrain w_0 on public data before the private rounds;
- model reuse (PPSGD, Wang & Zhou 2020, Alg. 1 line 25): after the private rounds, minimise
  L_pub(w) + λ‖w − w_T‖² from w_T.
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
