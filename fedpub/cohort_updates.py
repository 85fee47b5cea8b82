"""The cohort's updates, the one type the server steps before the average receive: a :class:`Cohort`.

A cohort is one row per user: each user's own update tensors times a per-row factor, stacked only when asked.
:meth:`~fedpub.strategy.StrategyCore.aggregate` hands the steps a :class:`Cohort` instead of one stacked copy of
the cohort. The clip and sum of user-level DP-FedAvg (McMahan et al. 2018) then read each user's update twice,
once for its norm and once for its share of the sum, and write a single model-sized sum: no stacked copy and no
clipped copy. For a 5M-parameter model and 50 users those copies are 2 GB of memory traffic a round, more than
the rest of the server step.

Clipping stays exact: :meth:`Cohort.scale` records the factors, and :meth:`Cohort.sum` adds each row once, times
its factor. A step that needs the tensors themselves gets them stacked and scaled (:meth:`Cohort.stacked`), new
tensors, never the rows.

A row's tensor may be a :class:`~fedpub.column_update.ColumnUpdate` (the changed columns of a bag-of-words
model's input weight): norms and sums read only its columns; :meth:`Cohort.stacked` and :meth:`Cohort.map` give
it as a plain tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from fedpub.column_update import RowSum, UpdateValue, dense, vector_norms
from fedpub.types import Params, Updates


def scale_leading(value: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """``value`` with row i of its leading dimension times ``factors[i]`` (cast to ``value``'s dtype)."""
    return value * factors.to(value.dtype).reshape((-1,) + (1,) * (value.dim() - 1))


def tensor_norms(rows: Sequence[Mapping[str, UpdateValue]], like: Params) -> torch.Tensor:
    """The L2 norm of each tensor (``like``'s keys) of each row, ``(rows, tensors)``, float64 (each computed in the
    tensor's dtype, all in one batched call)."""
    norms = vector_norms([row[key] for row in rows for key in like])
    if not norms:
        return torch.zeros(len(rows), len(like), dtype=torch.float64)
    return torch.stack(norms).double().reshape(len(rows), len(like))


def global_norms(norms: torch.Tensor) -> torch.Tensor:
    """Each row's global L2 norm, ``(rows,)``, from its tensors' norms, ``(rows, tensors)``."""
    return norms.pow(2).sum(dim=1).sqrt()


class Cohort:
    """Row k is ``factors[k] * rows[k]``; ``like`` gives the keys, shapes, dtypes and devices (there may be no
    rows). ``norms``, when given, are the rows' own global L2 norms (without the factors), already computed. The
    rows are never modified; every method returns a new cohort or new tensors. ``len(cohort)`` is the number of
    rows."""

    def __init__(
        self,
        rows: Sequence[Mapping[str, UpdateValue]],
        like: Params,
        factors: torch.Tensor | None = None,
        *,
        norms: torch.Tensor | None = None,
    ) -> None:
        self._rows = list(rows)
        self._like = like
        for name, value in (("factors", factors), ("norms", norms)):
            if value is not None and value.shape != (len(self._rows),):
                raise ValueError(f"{name} must have shape ({len(self._rows)},), got {tuple(value.shape)}")
        self._factors = factors
        self._norms = norms

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"Cohort({len(self._rows)} rows of {sorted(self._like)})"

    @property
    def like(self) -> Params:
        """The tensors the rows are shaped like (the model's parameters: names, shapes, dtypes, devices)."""
        return self._like

    def norms(self) -> torch.Tensor:
        """Each row's global L2 norm, shape ``(rows,)``, float64 (each tensor's norm in its own dtype)."""
        norms = self._norms if self._norms is not None else global_norms(tensor_norms(self._rows, self._like))
        return norms if self._factors is None else norms * self._factors.double().abs()

    def scale(self, factors: torch.Tensor) -> Cohort:
        """Row k times ``factors[k]``, with nothing copied."""
        combined = factors if self._factors is None else self._factors * factors
        return Cohort(self._rows, self._like, combined, norms=self._norms)

    def map(self, fn: Callable[[Updates], Updates]) -> Cohort:
        """``fn`` applied to every row, as plain tensors (its factor applied first)."""
        rows = [{k: dense(v) for k, v in row.items()} for row in self._rows]
        if self._factors is not None:
            rows = [{k: v * f for k, v in row.items()} for row, f in zip(rows, self._factors.tolist(), strict=True)]
        return Cohort([fn(row) for row in rows], self._like)

    def sum(self, times: float | None = None) -> Updates:
        """Σ_k factors[k] · rows[k], each row added once into one model-sized sum; with ``times``, that sum times
        ``times`` (the same values as :func:`fedpub.tree.scale` of the sum, without another model-sized copy)."""
        factors = [1.0] * len(self._rows) if self._factors is None else self._factors.tolist()
        sums = {key: RowSum(like) for key, like in self._like.items()}
        for row, factor in zip(self._rows, factors, strict=True):
            for key, total in sums.items():
                total.add(row[key], factor)
        return {key: total.result(times) for key, total in sums.items()}

    def stacked(self) -> Updates:
        """Every tensor with its rows stacked and scaled: a leading dimension of rows (new tensors)."""
        return {key: self._stack(key) for key in self._like}

    def mean(self) -> Updates:
        """The rows' mean (of the stacked rows, :meth:`stacked`); NaN with no rows."""
        return {key: value.mean(dim=0) for key, value in self.stacked().items()}

    def _stack(self, key: str) -> torch.Tensor:
        like = self._like[key]
        if not self._rows:
            return torch.zeros((0, *like.shape), dtype=like.dtype, device=like.device)
        stacked = torch.stack([dense(row[key]) for row in self._rows])
        return stacked if self._factors is None else scale_leading(stacked, self._factors)
