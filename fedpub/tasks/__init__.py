"""How a model's outputs are scored: the training loss and the metrics, per task (TFF's baselines).

A task is named by the config's ``task`` and declared by the datasets that serve it (:mod:`fedpub.data.registry`):
:func:`get_task` resolves the declaration; a config's own task (``task: {loss, metrics}``, per-example callables)
is built by :func:`own_task`. Plain classification (softmax cross-entropy and accuracy) is here; a
dataset's own scores are in its module of this package. Metrics are (numerator, denominator) pairs summed over
batches, so any batching gives the same value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from fedpub.config import TaskConfig
from fedpub.data import registry
from fedpub.data.spec import resolve

Counts = dict[str, tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Task:
    name: str
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """Mean loss of a batch (what local SGD minimises)."""
    counts: Callable[[torch.Tensor, torch.Tensor], Counts]
    """(numerator, denominator) of every metric on a batch."""
    headline: str
    """The metric reported in progress bars, summaries and plots (a key of ``counts``)."""
    example_losses: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    """Per-example losses ``(B,)`` whose mean is ``loss``: lets padded batches be masked (vectorised
    training). ``None`` when the loss does not split by example (token-averaged next-word loss)."""
    example_headline: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
    """Per-example (numerator, denominator) ``(B,)`` of the headline metric, summing to ``counts``'s."""


def _classification_counts(logits: torch.Tensor, y: torch.Tensor) -> Counts:
    correct = (logits.argmax(dim=-1) == y).sum()
    return {"accuracy": (correct, torch.tensor(y.numel()))}


def _classification_example_losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y, reduction="none")


def _classification_example_headline(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    correct = (logits.argmax(dim=-1) == y).to(logits.dtype)
    return correct, torch.ones_like(correct)


CLASSIFICATION = Task(
    "classification", F.cross_entropy, _classification_counts, "accuracy",
    _classification_example_losses, _classification_example_headline,
)


PerExample = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``(outputs, y) -> (B,)``: one loss or metric value per example of a batch of B."""


def _per_example(fn: PerExample, field: str, outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    values = fn(outputs, y)
    if not isinstance(values, torch.Tensor) or values.shape != (outputs.shape[0],):
        shape = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
        raise ValueError(f"{field} must return one value per example, a tensor of shape ({outputs.shape[0]},); got "
                         f"{shape}")
    return values


def _mean(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], outputs: torch.Tensor,
          y: torch.Tensor) -> torch.Tensor:
    return fn(outputs, y).mean()


def _counts(metrics: Mapping[str, Callable[..., torch.Tensor]], outputs: torch.Tensor, y: torch.Tensor) -> Counts:
    counts: Counts = {}
    for name, fn in metrics.items():
        values = fn(outputs, y)
        counts[name] = (values.sum(), torch.tensor(values.numel()))
    return counts


def _headline(fn: Callable[..., torch.Tensor], outputs: torch.Tensor,
              y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values = fn(outputs, y)
    return values, torch.ones_like(values)


def own_task(loss: PerExample, metrics: Sequence[PerExample], *, names: Sequence[str] = (),
             fields: Sequence[str] = ()) -> Task:
    """A task from a per-example ``loss`` and per-example ``metrics`` (the first is the headline), each metric named
    by ``names`` (default: the callables' names); ``fields`` name them in errors (default ``task.loss``,
    ``task.metrics[i]``). A value of another shape than ``(B,)`` raises, naming the field."""
    names = list(names) or [getattr(fn, "__name__", f"metric{i}") for i, fn in enumerate(metrics)]
    fields = list(fields) or ["task.loss", *(f"task.metrics[{i}]" for i in range(len(metrics)))]
    if not metrics or len(set(names)) != len(names) or "loss" in names:
        raise ValueError(f"a task needs at least one metric, each with its own name other than 'loss'; got {names}")
    example_losses = partial(_per_example, loss, fields[0])
    checked = {name: partial(_per_example, fn, field) for name, fn, field in zip(names, metrics, fields[1:])}
    headline = names[0]
    return Task("own", partial(_mean, example_losses), partial(_counts, checked), headline, example_losses,
                partial(_headline, checked[headline]))


def get_task(spec: str | TaskConfig | Mapping[str, Any]) -> Task:
    """The task a config's ``task`` gives: a preset's name, as the dataset declaring it says (a ValueError lists the
    allowed tasks), or a config's own ``{loss, metrics}`` (a mapping as read from a run's config.yaml)."""
    if isinstance(spec, str):
        task: Task = resolve(registry.task(spec).task)
        return task
    own = spec if isinstance(spec, TaskConfig) else TaskConfig.model_validate(spec)
    return own_task(resolve(own.loss), [resolve(m) for m in own.metrics],
                    names=[m.rpartition(":")[2].rpartition(".")[2] for m in own.metrics])
