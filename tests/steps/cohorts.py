"""Test helper: a stacked tensor dict as the :class:`~fedpub.cohort_updates.Cohort` the steps receive."""

from __future__ import annotations

import torch

from fedpub.cohort_updates import Cohort


def cohort(stacked: dict[str, torch.Tensor]) -> Cohort:
    """One row per index of the leading dimension (views of ``stacked``; the cohort never modifies them)."""
    sizes = {v.shape[0] for v in stacked.values()}
    if len(sizes) != 1:
        raise ValueError(f"stacked tensors disagree on the number of rows: {sorted(sizes)}")
    rows = [{k: v[i] for k, v in stacked.items()} for i in range(sizes.pop())]
    like = {k: torch.zeros(v.shape[1:], dtype=v.dtype) for k, v in stacked.items()}
    return Cohort(rows, like)
