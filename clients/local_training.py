"""Local training of one user: E epochs of minibatch SGD from the global model (FedAvg, McMahan
et al. 2017). One function serves every backend: the in-process engine, Flower simulation and
real SuperNodes. The model is resident: its parameters are overwritten in place, never rebuilt.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from fedpub.clients.input_columns import input_columns
from fedpub.clients.payload_hooks import local_adjustment
from fedpub.column_update import UpdateValue
from fedpub.data.base import ClientData
from fedpub.payloads import Payloads
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
    timeout_s: float | None = None
    """Wall-clock seconds a user's local training may take, checked after every local step
    (:func:`stop_if_late`); None = no limit."""


@dataclass(frozen=True)
class ClientResult:
    """The user's update Δ = w_local − w_global (on the CPU; maybe a
    :class:`~fedpub.column_update.ColumnUpdate` for a bag-of-words input layer), its example count and metrics."""

    update: Mapping[str, UpdateValue]
    num_examples: int
    metrics: Mapping[str, float]


@dataclass(frozen=True)
class ClientFailure:
    """A user whose local training raised: it sends no update (contributes nothing to the round)."""

    error: str
    """The exception, as ``Type: message`` (cut to :data:`ERROR_CHARS` characters)."""

    @classmethod
    def of(cls, exc: BaseException) -> ClientFailure:
        text = f"{type(exc).__name__}: {exc}"
        return cls(text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…")


ERROR_CHARS = 300


class ClientTimeout(TimeoutError):
    """A user's local training passed ``timeout_s``: it sends nothing, like a Flower node past the round's deadline."""


def stop_if_late(config: LocalTrainingConfig, started: float, steps_done: int, steps: int) -> None:
    """Raise :class:`ClientTimeout` when more than ``config.timeout_s`` seconds have passed since ``started``
    (a :func:`time.perf_counter` reading). Called between local steps: a single step that never returns is
    not stopped (no watchdog thread interrupts a kernel)."""
    if config.timeout_s is None:
        return
    elapsed = time.perf_counter() - started
    if elapsed > config.timeout_s:
        raise ClientTimeout(
            f"local training passed client.timeout_s = {config.timeout_s:g} s ({elapsed:.2f} s, "
            f"{steps_done} of {steps} local steps done)"
        )


def load_params_(model: torch.nn.Module, params: Params) -> None:
    """Overwrite the model's parameters in place with ``params`` (same names)."""
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            tensor.copy_(params[name])


@dataclass(frozen=True)
class LocalPlan:
    """What one user's local training will do, drawn from its generator: the (capped) examples, the
    minibatch index order of every local step, and the seed of stochastic layers (dropout)."""

    x: torch.Tensor
    y: torch.Tensor
    batches: list[torch.Tensor]
    layer_seed: int


def plan_local_training(data: ClientData, config: LocalTrainingConfig, generator: torch.Generator) -> LocalPlan:
    """Draw the user's subsample (``max_examples``), layer seed and per-epoch shuffles, in that order, from
    ``generator``: the per-client loop and the vectorised cohort trainer both follow this plan."""
    x, y = data.x, data.y
    if config.max_examples is not None and len(y) > config.max_examples:
        keep = torch.randperm(len(y), generator=generator)[: config.max_examples]
        x, y = x[keep], y[keep]
    n = len(y)
    layer_seed = int(torch.randint(2**62, (1,), generator=generator))
    batches = []
    for _ in range(config.epochs):
        order = torch.randperm(n, generator=generator)
        batches += [order[start : start + config.batch_size] for start in range(0, n, config.batch_size)]
    return LocalPlan(x, y, batches, layer_seed)


def seed_layers(seed: int, device: torch.device) -> None:
    """Seed the generator the model's stochastic layers draw from on ``device`` (``torch.manual_seed`` without
    its per-call cost of seeding every CUDA device)."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)


class LocalSGD:
    """Minibatch SGD on named tensors, in place, with torch.optim.SGD's arithmetic (momentum without dampening or
    Nesterov, no weight decay); each gradient is first divided by its ``divisors`` entry, if any (the round's
    payloads' :class:`~fedpub.clients.payload_hooks.LocalAdjustment`: AdaDPS on the client, Li et al. 2023,
    Alg. 3). The per-client loop steps a user's parameters with it, the vectorised
    cohort trainer the stacked parameters of a group (a divisor broadcasts over the users). A small client's
    step costs little more than its arithmetic: no optimizer bookkeeping, no ``.grad`` to zero."""

    def __init__(self, params: Mapping[str, torch.Tensor], config: LocalTrainingConfig, divisors: Updates) -> None:
        self.params, self.lr, self.momentum, self.divisors = params, config.lr, config.momentum, divisors
        self._velocity: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def step(self, gradients: Mapping[str, torch.Tensor | None]) -> None:
        """p ← p − lr·v with v = g / divisor (plus momentum·v of the last step); a tensor without a gradient
        (absent or ``None``: frozen, or unused by the loss) is left as it is, as torch.optim leaves it."""
        for name, param in self.params.items():
            g = gradients.get(name)
            if g is None:
                continue
            if name in self.divisors:
                g = g / self.divisors[name]
            if self.momentum:
                velocity = self._velocity.get(name)
                g = self._velocity[name] = g.clone() if velocity is None else velocity.mul_(self.momentum).add_(g)
            param.add_(g, alpha=-self.lr)


def train_client(
    model: torch.nn.Module,
    params: Params,
    data: ClientData,
    config: LocalTrainingConfig,
    generator: torch.Generator,
    task: Task = CLASSIFICATION,
    *,
    payloads: Payloads = {},  # noqa: B006 (read only)
    sparse_update: bool = False,
) -> ClientResult:
    """Train ``model`` from ``params`` on one user's data, minimising ``task.loss`` (plus
    ``config.prox_weight``·‖w − params‖²); return the update and metrics (``train_loss`` and
    ``train_<task.headline>``). The round's ``payloads`` adjust each local step, each by its hook
    (:mod:`fedpub.clients.payload_hooks`: with ``preconditioner`` A every local gradient is divided by A before the
    step, AdaDPS on the client, Li et al. 2023, Alg. 3); one without a hook raises
    :class:`~fedpub.clients.payload_hooks.UnknownPayload`.

    A model with a linear input layer on sparse features is trained cut to the columns the user's examples use
    (:func:`~fedpub.clients.input_columns.input_columns`: the same steps); with ``sparse_update`` that layer's update is
    then a :class:`~fedpub.column_update.ColumnUpdate`, else every tensor of the update is whole.

    ``generator`` (CPU) drives the shuffling and seeds any stochastic layer (dropout), so the
    same generator seed gives the same update. Past ``config.timeout_s`` it raises :class:`ClientTimeout`.
    """
    started = time.perf_counter()
    device = next(model.parameters()).device
    plan = plan_local_training(data, config, generator)
    x, y = plan.x.to(device), plan.y.to(device)
    start = {name: params[name].to(device) for name, _ in model.named_parameters()}
    divisors = {k: v.to(device) for k, v in local_adjustment(payloads).divisors.items()}
    cut = input_columns(model, plan.x)
    if cut is None:
        load_params_(model, params)
        trainable = dict(model.named_parameters())
        forward: Callable[[torch.Tensor], torch.Tensor] = model
    else:
        start, divisors, x = cut.cut(start), cut.cut(divisors), cut.cut_inputs(x)
        trainable = cut.trainable(model, start)
        forward = cut.forward(model, trainable)
    sgd = LocalSGD(trainable, config, divisors)
    differentiated = [name for name, p in trainable.items() if p.requires_grad]  # a frozen layer stays as it is
    loss_sum, hits, total, seen = 0.0, 0.0, 0.0, 0
    model.train()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        seed_layers(plan.layer_seed, device)
        for step, batch in enumerate(plan.batches):
            batch = batch.to(device)
            logits = forward(x[batch])
            loss = task.loss(logits, y[batch])
            objective = loss
            if config.prox_weight:
                objective = loss + config.prox_weight * sum(((p - start[n]) ** 2).sum() for n, p in trainable.items())
            gradients = torch.autograd.grad(objective, [trainable[n] for n in differentiated], allow_unused=True)
            sgd.step(dict(zip(differentiated, gradients)))
            loss_sum += loss.detach() * len(batch)
            numerator, denominator = task.counts(logits.detach(), y[batch])[task.headline]
            hits, total, seen = hits + numerator, total + denominator, seen + len(batch)
            stop_if_late(config, started, step + 1, len(plan.batches))
    delta = {name: p.detach().to("cpu") - start[name].to("cpu") for name, p in trainable.items()}
    update = delta if cut is None else cut.update(delta, params, sparse=sparse_update)
    return ClientResult(update, len(plan.y), training_metrics(task, loss_sum, hits, total, seen))


def training_metrics(task: Task, loss_sum: object, hits: object, total: object, seen: int) -> dict[str, float]:
    """``train_loss`` (example-weighted mean) and ``train_<headline>`` from a user's running sums."""
    return {
        "train_loss": float(loss_sum) / max(seen, 1),
        f"train_{task.headline}": float(hits) / max(float(total), 1.0),
    }
