"""Updates that change only some columns of one tensor, kept as those columns.

A bag-of-words model's local SGD changes only the input weights of the words the user wrote: on StackOverflow
tag prediction (the logistic regression of DOPE-SGD, Amid et al. 2022, and AdaDPS, Li et al. 2023) a user with a
few posts changes a few hundred of the 10,000 columns of a 5M-parameter weight
(:mod:`clients.input_columns`). :class:`ColumnUpdate` holds those columns; the server's clip and sum
(:class:`~fedpub.rows.UpdateRows`) read its norm and add it into the model-sized sum from them, so a cohort costs
memory and time in proportion to what its users changed, not users × the model. The mechanism is unchanged:
the norm is the norm of the whole tensor (every other entry is zero) and the sum adds the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ColumnUpdate:
    """A tensor of ``shape`` that is zero except in the last-dimension ``columns`` (increasing, distinct).
    ``values[j]`` is column ``columns[j]``: ``values`` has shape ``(len(columns), *shape[:-1])``, each column
    contiguous, so gathering, training and adding whole columns reads memory in order."""

    columns: torch.Tensor
    values: torch.Tensor
    shape: torch.Size

    def __post_init__(self) -> None:
        if self.columns.dim() != 1 or self.columns.dtype != torch.long:
            raise ValueError(f"ColumnUpdate columns must be a 1-D int64 tensor, got {self.columns.dtype} "
                             f"of shape {tuple(self.columns.shape)}")
        expected = (len(self.columns), *self.shape[:-1])
        if tuple(self.values.shape) != expected:
            raise ValueError(
                f"ColumnUpdate of shape {tuple(self.shape)} with {len(self.columns)} columns needs values of "
                f"shape {expected}, got {tuple(self.values.shape)}"
            )

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    def sum(self) -> torch.Tensor:
        """The sum of all entries (the zeros add nothing)."""
        return self.values.sum()

    def to_dense(self) -> torch.Tensor:
        dense = self.values.new_zeros(self.shape)
        dense.movedim(-1, 0).index_copy_(0, self.columns, self.values)
        return dense


UpdateValue = torch.Tensor | ColumnUpdate
"""One tensor of an update: plain, or only its changed columns."""


def dense(value: UpdateValue) -> torch.Tensor:
    """``value`` as a plain tensor."""
    return value.to_dense() if isinstance(value, ColumnUpdate) else value


def vector_norm(value: UpdateValue) -> torch.Tensor:
    """The L2 norm of all of ``value``'s entries, in its dtype."""
    return torch.linalg.vector_norm(value.values if isinstance(value, ColumnUpdate) else value)


def add_scaled_(target: torch.Tensor, value: UpdateValue, alpha: float) -> None:
    """``target += alpha * value`` in place, touching only ``value``'s columns when it is a :class:`ColumnUpdate`."""
    if isinstance(value, ColumnUpdate):
        target.movedim(-1, 0).index_add_(0, value.columns.to(target.device), value.values.to(target.device), alpha=alpha)
    else:
        target.add_(value, alpha=alpha)
