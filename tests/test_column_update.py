"""ColumnUpdate: a tensor kept as its changed columns reads, adds and densifies like the whole tensor."""

from __future__ import annotations

import pytest
import torch

from fedpub.column_update import ColumnUpdate, RowSum, dense, vector_norms


def _pair() -> tuple[ColumnUpdate, torch.Tensor]:
    columns = torch.tensor([1, 4, 5])
    values = torch.arange(1.0, 10.0).reshape(3, 3)  # values[j] is column columns[j]
    whole = torch.zeros(3, 7)
    whole[:, columns] = values.t()
    return ColumnUpdate(columns, values, torch.Size((3, 7))), whole


def test_dense_norm_sum_and_scaled_add_equal_the_whole_tensors():
    sparse, whole = _pair()
    assert torch.equal(dense(sparse), whole) and dense(whole) is whole
    assert sparse.shape == whole.shape and sparse.dtype == whole.dtype and sparse.device == whole.device
    assert vector_norms([sparse, whole]) == [torch.linalg.vector_norm(whole)] * 2 and vector_norms([]) == []
    total = RowSum(whole)
    for value, alpha in ((sparse, -0.5), (whole, 2.0), (sparse, 0.25)):
        total.add(value, alpha)
    torch.testing.assert_close(total.result(), 1.75 * whole)


def test_values_must_fit_the_shape_and_the_columns():
    with pytest.raises(ValueError, match=r"needs values of shape \(2, 3\), got \(3, 2\)"):
        ColumnUpdate(torch.tensor([0, 1]), torch.zeros(3, 2), torch.Size((3, 7)))
    with pytest.raises(ValueError, match="columns must be a 1-D int64 tensor, got torch.float32"):
        ColumnUpdate(torch.tensor([0.0, 1.0]), torch.zeros(2, 3), torch.Size((3, 7)))
