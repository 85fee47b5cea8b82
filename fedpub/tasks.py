"""How a model's outputs are scored: the training loss and the metrics, per task (TFF's baselines).

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

from fedpub.data.stackoverflow_tasks import (
    WORD_VOCAB_SIZE,
    next_word_metrics,
    precision_at_threshold,
    recall_at_k,
)

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


def _tag_example_losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Sigmoid cross-entropy summed over the tags, per example."""
    return F.binary_cross_entropy_with_logits(logits, y, reduction="none").sum(dim=-1)


def _tag_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Sigmoid cross-entropy summed over the tags, averaged over the examples."""
    return _tag_example_losses(logits, y).mean()


def _tag_example_recall_at_5(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per example: true tags among its 5 highest logits, and its true tags (micro recall@5's terms)."""
    top = logits.topk(5, dim=-1).indices
    return (y.gather(-1, top) > 0).sum(dim=-1).to(logits.dtype), (y > 0).sum(dim=-1).to(logits.dtype)


def _tag_counts(logits: torch.Tensor, y: torch.Tensor) -> Counts:
    return {"recall_at_5": recall_at_k(logits, y, 5), "precision": precision_at_threshold(logits, y, 0.5)}


TAG_PREDICTION = Task(
    "so_tag", _tag_loss, _tag_counts, "recall_at_5", _tag_example_losses, _tag_example_recall_at_5
)


def _next_word_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Token cross-entropy, padding (id 0) ignored."""
    return F.cross_entropy(logits.flatten(0, -2), y.flatten(), ignore_index=0)


def next_word_task(vocab_size: int) -> Task:
    """Next-word prediction over ``vocab_size`` words plus pad, OOV, BOS and EOS."""
    return Task(
        "so_nwp",
        _next_word_loss,
        lambda logits, y: next_word_metrics(logits, y, vocab_size),
        "accuracy_without_out_of_vocab_or_end_of_sentence",
    )


TASK_NAMES = ("classification", "so_tag", "so_tag_single", "so_nwp")


def get_task(name: str, word_vocab_size: int = WORD_VOCAB_SIZE) -> Task:
    """The task called ``name`` (``so_tag_single``, AdaDPS's single-label tags, is a classification)."""
    if name in ("classification", "so_tag_single"):
        return CLASSIFICATION
    if name == "so_tag":
        return TAG_PREDICTION
    if name == "so_nwp":
        return next_word_task(word_vocab_size)
    raise ValueError(f"unknown task {name!r}; allowed: {', '.join(TASK_NAMES)}")
