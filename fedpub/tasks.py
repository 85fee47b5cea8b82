"""How a model's outputs are scored: the training loss and the metrics, per task.

EMNIST character recognition and the StackOverflow tasks differ only here: softmax
cross-entropy and accuracy; sigmoid cross-entropy with recall@5 and precision at 0.5 for the
multi-label tag prediction (TFF's ``tag_prediction`` task); token cross-entropy ignoring padding
with accuracy as TFF reports it for next-word prediction. Metrics are (numerator, denominator)
pairs summed over batches, so any batching gives the same value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

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


def _classification_counts(logits: torch.Tensor, y: torch.Tensor) -> Counts:
    correct = (logits.argmax(dim=-1) == y).sum()
    return {"accuracy": (correct, torch.tensor(y.numel()))}


CLASSIFICATION = Task("classification", F.cross_entropy, _classification_counts, "accuracy")

TASKS: dict[str, Task] = {CLASSIFICATION.name: CLASSIFICATION}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; allowed: {', '.join(sorted(TASKS))}")
    return TASKS[name]
