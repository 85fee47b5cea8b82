"""UpdateRows, the cohort's updates as StrategyCore hands them to the steps, against stacked tensors."""

from __future__ import annotations

import pytest
import torch

from fedpub import tree
from fedpub.column_update import ColumnUpdate
from fedpub.privacy.events import PoissonSampling
from fedpub.rows import UpdateRows
from fedpub.types import RoundContext
from strategies.compose import build_strategy
from tests.test_public_strategies import COHORT, POPULATION, RECIPES, ROUNDS, SHAPES, Z, _config, _random_tree

LIKE = {k: torch.zeros(s) for k, s in SHAPES.items()}


def _cohort(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    return [_random_tree(seed + i, scale=float(i + 1)) for i in range(n)]


def test_reading_a_key_stacks_the_rows_scaled_by_their_factors():
    updates = _cohort(4)
    factors = torch.tensor([0.5, 1.0, 0.0, 2.0], dtype=torch.float64)
    rows = UpdateRows(updates, LIKE).scaled(factors)
    dense = tree.scale_rows(tree.stack(updates), factors)
    assert list(rows) == list(LIKE) and len(rows) == len(LIKE) and tree.num_rows(rows) == 4
    for k in LIKE:
        assert torch.equal(rows[k], dense[k])


def test_row_norms_sum_and_map_equal_the_stacked_ones_and_leave_the_rows_alone():
    updates = _cohort(5)
    before = [tree.clone(u) for u in updates]
    factors = torch.tensor([0.1, 1.0, 3.0, 0.0, 0.7], dtype=torch.float64)
    rows, dense = tree.scale_rows(UpdateRows(updates, LIKE), factors), tree.scale_rows(tree.stack(updates), factors)
    torch.testing.assert_close(tree.row_norms(rows), tree.row_norms(dense))
    for k, value in tree.sum_rows(rows).items():
        torch.testing.assert_close(value, tree.sum_rows(dense)[k])
    center = _random_tree(99)
    mapped = tree.map_rows(lambda row: tree.sub(row, center), rows)
    for k, value in tree.map_rows(lambda row: tree.sub(row, center), dense).items():
        torch.testing.assert_close(mapped[k], value)
    for u, b in zip(updates, before):
        assert all(torch.equal(u[k], b[k]) for k in u)


def test_factors_compose():
    updates = _cohort(3)
    rows = UpdateRows(updates, LIKE).scaled(torch.tensor([2.0, 1.0, 0.5])).scaled(torch.tensor([0.5, 3.0, 2.0]))
    for k in LIKE:
        expected = torch.stack([u[k] for u in updates]) * torch.tensor([1.0, 3.0, 1.0]).reshape(-1, *[1] * len(SHAPES[k]))
        torch.testing.assert_close(rows[k], expected)


def test_no_rows_give_zero_rows_and_a_zero_sum():
    rows = UpdateRows([], LIKE)
    assert tree.num_rows(rows) == 0 and tree.row_norms(rows).shape == (0,)
    assert all(rows[k].shape == (0, *SHAPES[k]) for k in LIKE)
    assert all(torch.equal(v, LIKE[k]) for k, v in tree.sum_rows(rows).items())
    assert all(torch.equal(v, LIKE[k]) for k, v in tree.row_zeros(rows).items())


def test_factors_must_have_one_entry_per_row():
    with pytest.raises(ValueError, match=r"factors must have shape \(2,\)"):
        UpdateRows(_cohort(2), LIKE, torch.ones(3))


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_recipe_aggregates_the_rows_as_it_aggregates_the_stacked_updates(recipe):
    """StrategyCore's round (rows, never stacked on the plain path) equals its chain run on stacked tensors."""
    config = _config(RECIPES[recipe])
    core = build_strategy(config, sampling=PoissonSampling(COHORT / POPULATION), population=POPULATION,
                          noise_multiplier=Z, seed=3, rounds=ROUNDS)
    params, cohort, public = _random_tree(0), _cohort(6, seed=10), _cohort(3, seed=40)
    state = core.init(params)
    for t in range(3):  # states that move (C, z, A) are carried the same way by both
        outcome = core.aggregate(params, cohort, state, t, public_updates=public)
        ctx = RoundContext(round=t, seed=3, population=POPULATION, sampling_rate=COHORT / POPULATION,
                           expected_cohort=float(COHORT), cohort_size=len(cohort), num_public=len(public))
        dense = core.aggregator.update(tree.stack(cohort), state, ctx=ctx, public_mean=tree.mean(public),
                                       public_updates=tree.stack(public))
        for k in params:
            torch.testing.assert_close(outcome.params[k], params[k] + dense.updates[k])
        params, state = outcome.params, outcome.state


def _column_sparse(update: dict[str, torch.Tensor], columns: list[int]) -> tuple[dict, dict]:
    """``update`` with "w" zero outside ``columns``: as plain tensors, and with "w" as a ColumnUpdate."""
    index = torch.tensor(columns, dtype=torch.long)
    values = update["w"].index_select(-1, index).t()
    sparse = ColumnUpdate(index, values, update["w"].shape)
    return {**update, "w": sparse.to_dense()}, {**update, "w": sparse}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_recipe_aggregates_column_updates_as_it_aggregates_the_whole_tensors(recipe):
    """The bag-of-words path: private updates whose input weight is a ColumnUpdate give the round the same
    model as the same updates as plain tensors (same seed, so the same noise)."""
    config = _config(RECIPES[recipe])
    core = build_strategy(config, sampling=PoissonSampling(COHORT / POPULATION), population=POPULATION,
                          noise_multiplier=Z, seed=3, rounds=ROUNDS)
    pairs = [_column_sparse(u, cols) for u, cols in zip(_cohort(4, seed=10), ([0], [1, 3], [], [0, 1, 2, 3]))]
    params, public = _random_tree(0), _cohort(3, seed=40)
    dense_state = sparse_state = core.init(params)
    for t in range(2):
        dense = core.aggregate(params, [d for d, _ in pairs], dense_state, t, public_updates=public)
        sparse = core.aggregate(params, [s for _, s in pairs], sparse_state, t, public_updates=public)
        for k in params:
            torch.testing.assert_close(sparse.params[k], dense.params[k])
        assert sparse.metrics == pytest.approx(dense.metrics)
        dense_state, sparse_state = dense.state, sparse.state


def test_rows_of_column_updates_read_like_their_plain_tensors():
    pairs = [_column_sparse(u, cols) for u, cols in zip(_cohort(3), ([2], [0, 3], []))]
    factors = torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64)
    dense = UpdateRows([d for d, _ in pairs], LIKE).scaled(factors)
    sparse = UpdateRows([s for _, s in pairs], LIKE).scaled(factors)
    torch.testing.assert_close(sparse.row_norms(), dense.row_norms())
    for k in LIKE:
        assert torch.equal(sparse[k], dense[k])
        torch.testing.assert_close(sparse.row_sum()[k], dense.row_sum()[k])
        torch.testing.assert_close(sparse.map(lambda row: tree.scale(row, 3.0))[k], 3.0 * dense[k])
