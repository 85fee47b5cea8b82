"""Flower records and fedpub's tensors: a model or an update as an ``ArrayRecord`` and back, and the numeric
metrics of a reply averaged by its ``num-examples``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from flwr.app import ArrayRecord, Message

from fedpub import protocol as key


def to_array_record(tensors: Mapping[str, torch.Tensor]) -> ArrayRecord:
    return ArrayRecord(torch_state_dict={k: v.detach().cpu() for k, v in tensors.items()})


def to_tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return dict(record.to_torch_state_dict())


def numeric_metrics(reply: Message) -> dict[str, float]:
    """A reply's numeric ``metrics`` (none when it has no metrics record)."""
    content = reply.content
    record = content[key.METRICS] if key.METRICS in content else {}
    return {k: float(v) for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def weighted_mean(metrics: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each metric's mean over ``metrics``, weighted by their ``num-examples`` (equal weights when none has it);
    ``num-examples`` itself is summed."""
    if not metrics:
        return {}
    weights = [float(m.get(key.NUM_EXAMPLES, 0.0)) for m in metrics]
    if sum(weights) <= 0:
        weights = [1.0] * len(metrics)
    names = sorted({k for m in metrics for k in m if k != key.NUM_EXAMPLES})
    means = {}
    for name in names:
        pairs = [(w, m[name]) for w, m in zip(weights, metrics, strict=True) if name in m]
        total = sum(w for w, _ in pairs)
        if total > 0:
            means[name] = sum(w * v for w, v in pairs) / total
    return {**means, key.NUM_EXAMPLES: sum(float(m.get(key.NUM_EXAMPLES, 0.0)) for m in metrics)}
