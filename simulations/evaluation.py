"""Central evaluation of the global model on the test split of a fixed set of clients."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from clients.local_training import load_params_
from fedpub.data.base import FederatedDataset
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
    model: torch.nn.Module, params: Params, data: EvaluationSet, batch_size: int = 1024
) -> dict[str, float]:
    """Mean cross-entropy and accuracy of ``params`` on ``data``."""
    load_params_(model, params)
    model.eval()
    loss_sum = torch.zeros((), device=data.y.device)
    correct = torch.zeros((), device=data.y.device)
    for start in range(0, len(data.y), batch_size):
        logits = model(data.x[start : start + batch_size])
        target = data.y[start : start + batch_size]
        loss_sum += F.cross_entropy(logits, target, reduction="sum")
        correct += (logits.argmax(dim=1) == target).sum()
    n = max(len(data.y), 1)
    return {"eval_loss": float(loss_sum) / n, "eval_accuracy": float(correct) / n}
