"""Central evaluation of the global model on the test split of a fixed set of clients.

Whose test examples (:func:`fedpub.data.users.evaluation_users`): the public users' by default when they have some,
else those of evaluation users held out of the private population, since a private user's test examples are private
data too; an evaluation on private users' examples (only when asked) is labelled so in every record, summary and
plot (:attr:`~fedpub.data.users.EvaluationUsers.label`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fedpub.clients.local_training import load_params_
from fedpub.data.base import FederatedDataset
from fedpub.tasks import CLASSIFICATION, Task
from fedpub.types import Params


@dataclass(frozen=True)
class EvaluationSet:
    """The pooled test examples of ``client_ids``, loaded once and kept on the model's device."""

    x: torch.Tensor
    y: torch.Tensor

    @classmethod
    def pooled(
        cls, dataset: FederatedDataset, client_ids: Sequence[str], device: torch.device
    ) -> EvaluationSet:
        parts = [dataset.client_data(cid) for cid in client_ids]
        x = torch.cat([p.x for p in parts]).to(device)
        y = torch.cat([p.y for p in parts]).to(device)
        return cls(x, y)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    params: Params,
    data: EvaluationSet,
    task: Task = CLASSIFICATION,
    batch_size: int = 1024,
) -> dict[str, float]:
    """``eval_loss`` (the task's loss, averaged over batches weighted by size) and every task
    metric as ``eval_<metric>`` for ``params`` on ``data``."""
    load_params_(model, params)
    model.eval()
    loss_sum = 0.0
    sums: dict[str, list[float]] = {}
    for start in range(0, len(data.y), batch_size):
        logits = model(data.x[start : start + batch_size])
        target = data.y[start : start + batch_size]
        loss_sum += float(task.loss(logits, target)) * len(target)
        for name, (numerator, denominator) in task.counts(logits, target).items():
            acc = sums.setdefault(name, [0.0, 0.0])
            acc[0] += float(numerator)
            acc[1] += float(denominator)
    result = {"eval_loss": loss_sum / max(len(data.y), 1)}
    result.update({f"eval_{name}": num / max(den, 1.0) for name, (num, den) in sums.items()})
    return result
