"""How a model's outputs are scored: the training loss and the metrics, per task (TFF's baselines).

A task is named by the config's ``task`` and declared by the datasets that serve it (:mod:`fedpub.data.registry`):
:func:`get_task` resolves the declaration. Plain classification (softmax cross-entropy and accuracy) is here; a
dataset's own scores are in its module of this package. Metrics are (numerator, denominator) pairs summed over
batches, so any batching gives the same value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

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


def get_task(name: str) -> Task:
    """The task called ``name``, as the dataset declaring it says; a ValueError lists the allowed tasks."""
    task: Task = resolve(registry.task(name).task)
    return task
