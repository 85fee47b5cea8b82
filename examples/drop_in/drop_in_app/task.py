"""The model, each node's data and local training: a Flower user's own code, nothing fedpub-specific.

Logistic regression on 10-D synthetic features. Every node makes its own examples from its ``partition-id``
(deterministically): the labels follow one shared true model, the features are centred somewhere else on each
node (non-IID users). The server holds no data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

FEATURES = 10
CLASSES = 2
TASK_SEED = 2024
"""Seed of the true model every node's labels follow."""

DEFAULT_CONFIG: dict[str, Any] = {
    "num-rounds": 3,
    "population": 4,
    "num-public": 2,
    "clients-per-round": 2.0,
    "public-clients-per-round": 2,
    "clip-norm": 1.0,
    "noise-multiplier": 1.0,
    "delta": 1e-5,
    "seed": -1,
    "local-epochs": 1,
    "local-lr": 0.1,
    "batch-size": 16,
    "round-timeout": 600.0,
}
"""The ``[tool.flwr.app.config]`` defaults of pyproject.toml, for a run config without them (run_simulation)."""


def setting(run_config: Mapping[str, Any], key: str) -> Any:
    """The run config's ``key``, or its default."""
    return run_config.get(key, DEFAULT_CONFIG[key])


class Net(nn.Module):
    """Logistic regression (two logits), initialised at zero."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(FEATURES, CLASSES)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def load_data(partition_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Node ``partition_id``'s examples (features, labels): 32 to 64 of them, the same every time."""
    true_weight = torch.randn(FEATURES, generator=torch.Generator().manual_seed(TASK_SEED))
    g = torch.Generator().manual_seed(10_000 + partition_id)
    n = 32 + 8 * (partition_id % 5)
    centre = 0.5 * torch.randn(FEATURES, generator=g)
    x = torch.randn(n, FEATURES, generator=g) + centre
    y = (torch.rand(n, generator=g) < torch.sigmoid(x @ true_weight)).long()
    return x, y


def train(
    params: Mapping[str, torch.Tensor],
    data: tuple[torch.Tensor, torch.Tensor],
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    preconditioner: Mapping[str, torch.Tensor] | None = None,
) -> tuple[dict[str, torch.Tensor], int, float]:
    """Local minibatch SGD from ``params``: (the new weights, the number of examples, the mean training loss).
    ``preconditioner``: each gradient is divided by it element-wise before the step (AdaDPS on the clients)."""
    model = Net()
    model.load_state_dict(params)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = data
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=g)
        for start in range(0, len(y), batch_size):
            batch = order[start : start + batch_size]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            if preconditioner is not None:
                for name, p in model.named_parameters():
                    p.grad /= preconditioner[name]
            optimizer.step()
            losses.append(loss.item())
    new = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return new, len(y), sum(losses) / len(losses)
