"""Federated StackOverflow's scores (TFF's baselines): sigmoid cross-entropy with recall@5 and precision at 0.5 for
the multi-label tag prediction (TFF's ``tag_prediction`` task); token cross-entropy ignoring padding, with accuracy
as TFF reports it, for next-word prediction. AdaDPS's single-label tags are plain classification.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedpub.data.stackoverflow_tasks import (
    WORD_VOCAB_SIZE,
    next_word_metrics,
    precision_at_threshold,
    recall_at_k,
)
from fedpub.tasks import Counts, Task


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


NEXT_WORD_PREDICTION = next_word_task(WORD_VOCAB_SIZE)
"""The task's next-word prediction: TFF's 10,000-word vocabulary."""
