"""ColumnUpdate: a tensor kept as its changed columns reads, adds and densifies like the whole tensor."""

from __future__ import annotations

import pytest
import torch

from fedpub import column_update
from fedpub.column_update import ColumnUpdate, RowSum, dense, vector_norms
from fedpub.privacy.events import PoissonSampling
from fedpub.step import chain
from fedpub.steps.aggregate import aggregate
from fedpub.steps.clip import clip
from fedpub.strategy import StrategyCore


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


@pytest.mark.parametrize(
    ("columns", "well_formed"),
    [([1, 4, 5], True), ([], True), ([4, 4, 5], False), ([5, 4, 1], False), ([-1, 4, 5], False), ([1, 4, 7], False)],
)
def test_only_distinct_increasing_in_range_columns_are_well_formed(columns, well_formed):
    update = ColumnUpdate(torch.tensor(columns, dtype=torch.long), torch.ones(len(columns), 3), torch.Size((3, 7)))
    assert update.well_formed() is well_formed


def test_a_repeated_or_out_of_range_column_is_refused_like_a_nan_update():
    """One column repeated 100 times would add 100× its values to the sum while its norm counts them 10×: the
    core refuses the update (it contributes nothing, and counts as failed), as it refuses a NaN one."""

    params = {"w": torch.zeros(3, 7)}
    core = StrategyCore("mean", chain(clip(1.0), aggregate()),
                        PoissonSampling(0.5), population=4, seed=0)
    honest = {"w": ColumnUpdate(torch.tensor([2]), torch.full((1, 3), 0.1), torch.Size((3, 7)))}
    repeated = {"w": ColumnUpdate(torch.full((100,), 3), torch.full((100, 3), 0.1), torch.Size((3, 7)))}
    outside = {"w": ColumnUpdate(torch.tensor([7]), torch.full((1, 3), 0.1), torch.Size((3, 7)))}
    nan = {"w": torch.full((3, 7), float("nan"))}
    outcomes = [core.aggregate(params, [honest, bad], core.init(params), 0) for bad in (repeated, outside, nan)]
    for outcome in outcomes:
        assert outcome.diagnostics["cohort_failed"] == 1.0
        torch.testing.assert_close(outcome.params["w"], outcomes[-1].params["w"])
    assert outcomes[0].params["w"][:, 3].abs().sum() == 0 and outcomes[0].params["w"][:, 2].abs().sum() > 0


@pytest.mark.parametrize("dense_too", [False, True])
def test_few_or_many_touched_columns_sum_to_the_same_values_as_the_whole_tensors(dense_too, monkeypatch):
    """Few touched columns are summed through a buffer of those columns only, many through a buffer of them all:
    either way every entry adds the same terms in the same order, so the sums are equal bit for bit."""
    generator = torch.Generator().manual_seed(0)
    shape = torch.Size((4, 50))

    def update(columns: list[int]) -> ColumnUpdate:
        return ColumnUpdate(torch.tensor(columns), torch.randn(len(columns), 4, generator=generator), shape)

    few = [update([1, 7, 9]), update([7, 30]), update([2, 9, 49])]  # 7 of 50 columns
    many = [update(list(range(0, 40, 2))), update(list(range(1, 50, 3)))]  # over 0.4 of them
    plain = torch.randn(shape, generator=generator)
    for cohort in (few, many):
        total = RowSum(plain)
        expected = plain * 0.5 if dense_too else torch.zeros(shape)
        if dense_too:
            total.add(plain, 0.5)
        for k, value in enumerate(cohort):
            total.add(value, 0.1 * (k + 1))
            expected = expected + 0.1 * (k + 1) * value.to_dense()
        torch.testing.assert_close(total.result(times=3.0), 3.0 * expected)
    # the compact buffer's sum is the whole buffer's, bit for bit
    sums = []
    for compact in (0.0, 1.0):
        monkeypatch.setattr(column_update, "COMPACT_FRACTION", compact)
        total = RowSum(plain)
        for k, value in enumerate(few):
            total.add(value, 0.1 * (k + 1))
        sums.append(total.result(times=3.0))
    assert torch.equal(sums[0], sums[1])
