"""The Cohort, the cohort's updates as StrategyCore hands them to the steps, against the maths on stacked tensors."""

from __future__ import annotations

import pytest
import torch

from fedpub import tree
from fedpub.cohort_updates import Cohort
from fedpub.column_update import ColumnUpdate
from fedpub.privacy.events import PoissonSampling
from fedpub.types import RoundContext
from fedpub.strategies.compose import build_strategy
from tests.test_public_strategies import COHORT, POPULATION, RECIPES, ROUNDS, SHAPES, Z, _config, _random_tree

LIKE = {k: torch.zeros(s) for k, s in SHAPES.items()}


def _cohort(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    return [_random_tree(seed + i, scale=float(i + 1)) for i in range(n)]


def _stacked(updates: list[dict[str, torch.Tensor]], factors: torch.Tensor) -> dict[str, torch.Tensor]:
    """The reference: every tensor stacked, row i times ``factors[i]``."""
    return {k: torch.stack([u[k] for u in updates]) * factors.float().reshape(-1, *[1] * len(s))
            for k, s in SHAPES.items()}


def test_stacked_gives_the_rows_scaled_by_their_factors():
    updates = _cohort(4)
    factors = torch.tensor([0.5, 1.0, 0.0, 2.0], dtype=torch.float64)
    cohort = Cohort(updates, LIKE).scale(factors)
    assert len(cohort) == 4
    for k, value in cohort.stacked().items():
        assert torch.equal(value, _stacked(updates, factors)[k])


def test_norms_sum_map_and_mean_equal_the_stacked_maths_and_leave_the_rows_alone():
    updates = _cohort(5)
    before = [tree.clone(u) for u in updates]
    factors = torch.tensor([0.1, 1.0, 3.0, 0.0, 0.7], dtype=torch.float64)
    cohort, dense = Cohort(updates, LIKE).scale(factors), _stacked(updates, factors)
    squares = sum(v.double().flatten(start_dim=1).pow(2).sum(dim=1) for v in dense.values())
    torch.testing.assert_close(cohort.norms(), squares.sqrt())
    center = _random_tree(99)
    mapped = cohort.map(lambda row: tree.sub(row, center)).stacked()
    for k, value in dense.items():
        torch.testing.assert_close(cohort.sum()[k], value.sum(dim=0))
        torch.testing.assert_close(cohort.mean()[k], value.mean(dim=0))
        torch.testing.assert_close(mapped[k], value - center[k])
    for u, b in zip(updates, before):
        assert all(torch.equal(u[k], b[k]) for k in u)


def test_factors_compose():
    updates = _cohort(3)
    cohort = Cohort(updates, LIKE).scale(torch.tensor([2.0, 1.0, 0.5])).scale(torch.tensor([0.5, 3.0, 2.0]))
    for k, value in cohort.stacked().items():
        torch.testing.assert_close(value, _stacked(updates, torch.tensor([1.0, 3.0, 1.0]))[k])


def test_no_rows_give_zero_rows_and_a_zero_sum():
    cohort = Cohort([], LIKE)
    assert len(cohort) == 0 and cohort.norms().shape == (0,)
    assert all(value.shape == (0, *SHAPES[k]) for k, value in cohort.stacked().items())
    assert all(torch.equal(v, LIKE[k]) for k, v in cohort.sum().items())
    assert cohort.like is LIKE


def test_factors_and_norms_must_have_one_entry_per_row():
    with pytest.raises(ValueError, match=r"factors must have shape \(2,\)"):
        Cohort(_cohort(2), LIKE, torch.ones(3))
    with pytest.raises(ValueError, match=r"norms must have shape \(2,\)"):
        Cohort(_cohort(2), LIKE, norms=torch.ones(1))


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_recipe_aggregates_as_its_chain_does_on_the_cohort(recipe):
    """StrategyCore's round (usable rows with their norms already read, the public mean and the context) equals
    its chain run on a cohort of the same updates."""
    config = _config(RECIPES[recipe])
    core = build_strategy(config, sampling=PoissonSampling(COHORT / POPULATION), population=POPULATION,
                          noise_multiplier=Z, seed=3, rounds=ROUNDS)
    params, cohort, public = _random_tree(0), _cohort(6, seed=10), _cohort(3, seed=40)
    state = core.init(params)
    for t in range(3):  # states that move (C, z, A) are carried the same way by both
        outcome = core.aggregate(params, cohort, state, t, public_updates=public)
        ctx = RoundContext(round=t, seed=3, population=POPULATION, sampling_rate=COHORT / POPULATION,
                           expected_cohort=float(COHORT), cohort_size=len(cohort), num_public=len(public))
        direct = core.aggregator.update(Cohort(cohort, LIKE), state, ctx=ctx, public_mean=tree.mean(public),
                                        public_updates=Cohort(public, LIKE))
        for k in params:
            assert torch.equal(outcome.params[k], params[k] + direct.updates[k])
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
    dense = Cohort([d for d, _ in pairs], LIKE).scale(factors)
    sparse = Cohort([s for _, s in pairs], LIKE).scale(factors)
    torch.testing.assert_close(sparse.norms(), dense.norms())
    tripled = sparse.map(lambda row: tree.scale(row, 3.0)).stacked()
    for k, value in dense.stacked().items():
        assert torch.equal(sparse.stacked()[k], value)
        torch.testing.assert_close(sparse.sum()[k], dense.sum()[k])
        torch.testing.assert_close(tripled[k], 3.0 * value)


@pytest.mark.parametrize("rows", ["dense", "columns", "mixed", "none"])
def test_a_sum_times_a_factor_is_bit_for_bit_the_scaled_sum(rows):
    g = torch.Generator().manual_seed(0)
    like = {"w": torch.zeros(30, 200), "b": torch.zeros(30)}

    def row(i):
        columns = torch.randperm(200, generator=g)[: 10 + i].sort().values
        w = ColumnUpdate(columns, torch.randn(len(columns), 30, generator=g), torch.Size([30, 200]))
        dense = rows == "dense" or (rows == "mixed" and i % 2 == 0)
        return {"w": w.to_dense() if dense else w, "b": torch.randn(30, generator=g)}

    count = 0 if rows == "none" else 5
    cohort = Cohort([row(i) for i in range(count)], like).scale(torch.rand(count, generator=g))
    expected = tree.scale(cohort.sum(), 1.0 / 7.3)
    fused = cohort.sum(times=1.0 / 7.3)
    for key in like:
        assert fused[key].is_contiguous() and torch.equal(fused[key], expected[key])
