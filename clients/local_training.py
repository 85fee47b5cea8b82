"""Local training of one user: E epochs of minibatch SGD from the global model (FedAvg, McMahan
et al. 2017). One function serves every backend: the in-process engine, Flower simulation and
real SuperNodes. The model is resident: its parameters are overwritten in place, never rebuilt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from fedpub.data.base import ClientData
from fedpub.tasks import CLASSIFICATION, Task
from fedpub.types import Params, Updates


@dataclass(frozen=True)
class LocalTrainingConfig:
    epochs: int = 1
    batch_size: int = 16
    lr: float = 0.05
    momentum: float = 0.0
    max_examples: int | None = None
    prox_weight: float = 0.0
    """λ of λ‖w − w_start‖² added to the loss (PPSGD's model reuse); 0 = plain local SGD."""


@dataclass(frozen=True)
class ClientResult:
    """The user's update Δ = w_local − w_global (on the CPU), its example count and metrics."""

    update: Updates
    num_examples: int
    metrics: Mapping[str, float]


def default_device() -> torch.device:
    """CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_params_(model: torch.nn.Module, params: Params) -> None:
    """Overwrite the model's parameters in place with ``params`` (same names)."""
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            tensor.copy_(params[name])


def model_params(model: torch.nn.Module) -> Params:
    """A detached CPU copy of the model's parameters."""
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}


def train_client(
    model: torch.nn.Module,
    params: Params,
    data: ClientData,
    config: LocalTrainingConfig,
    generator: torch.Generator,
    task: Task = CLASSIFICATION,
    *,
    preconditioner: Updates | None = None,
) -> ClientResult:
    """Train ``model`` from ``params`` on one user's data, minimising ``task.loss`` (plus
    ``config.prox_weight``·‖w − params‖²); return the update and metrics (``train_loss`` and
    ``train_<task.headline>``). With a ``preconditioner`` A every local gradient is divided by A
    before the step (AdaDPS on the client, Li et al. 2023, Alg. 3).

    ``generator`` (CPU) drives the shuffling and seeds any stochastic layer (dropout), so the
    same generator seed gives the same update.
    """
    device = next(model.parameters()).device
    load_params_(model, params)
    x, y = data.x, data.y
    if config.max_examples is not None and len(y) > config.max_examples:
        keep = torch.randperm(len(y), generator=generator)[: config.max_examples]
        x, y = x[keep], y[keep]
    x, y = x.to(device), y.to(device)
    n = len(y)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    named = list(model.named_parameters())
    anchor = {name: params[name].to(device) for name, _ in named} if config.prox_weight else {}
    divisors = {k: v.to(device) for k, v in preconditioner.items()} if preconditioner is not None else {}
    loss_sum, hits, total, seen = 0.0, 0.0, 0.0, 0
    layer_seed = int(torch.randint(2**62, (1,), generator=generator))
    model.train()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(layer_seed)
        for _ in range(config.epochs):
            order = torch.randperm(n, generator=generator).to(device)
            for start in range(0, n, config.batch_size):
                batch = order[start : start + config.batch_size]
                logits = model(x[batch])
                loss = task.loss(logits, y[batch])
                objective = loss
                if anchor:
                    objective = loss + config.prox_weight * sum(((p - anchor[n]) ** 2).sum() for n, p in named)
                optimizer.zero_grad(set_to_none=True)
                objective.backward()
                for name, p in named:
                    if name in divisors and p.grad is not None:
                        p.grad.div_(divisors[name])
                optimizer.step()
                loss_sum += loss.detach() * len(batch)
                numerator, denominator = task.counts(logits.detach(), y[batch])[task.headline]
                hits, total, seen = hits + numerator, total + denominator, seen + len(batch)
    update = {
        name: p.detach().to("cpu") - params[name].to("cpu") for name, p in model.named_parameters()
    }
    metrics = {
        "train_loss": float(loss_sum) / max(seen, 1),
        f"train_{task.headline}": float(hits) / max(float(total), 1.0),
    }
    return ClientResult(update, n, metrics)
