"""The public-subspace projection (fedpub/steps/project.py): the basis is the public updates' top-k subspace,
orthonormal; the projection is idempotent and orthogonal, leaves a row of the subspace unchanged, reads column
updates as their dense tensors; a round without public updates passes through; the noise projection keeps a mean
in the subspace and removes what is orthogonal to it."""

from __future__ import annotations

import pytest
import torch

from fedpub.cohort_updates import Cohort
from fedpub.column_update import ColumnUpdate
from fedpub.steps.project import project, project_noise, project_onto, top_subspace
from tests.steps.cohorts import cohort

SHAPES = {"w": (6, 5), "b": (5,)}
D = 35


def _stacked(rows: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(rows, *s, generator=g) for k, s in SHAPES.items()}


def _flat(update: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([update[k].reshape(-1) for k in SHAPES]).double()


def _matrix(basis: dict[str, torch.Tensor]) -> torch.Tensor:
    """The basis as an (r, d) matrix."""
    r = len(basis["w"])
    return torch.cat([basis[k].reshape(r, -1) for k in SHAPES], dim=1).double()


def test_the_basis_is_orthonormal_and_spans_the_public_updates_top_singular_directions():
    public = _stacked(8, seed=1)
    basis = top_subspace(cohort(public), 3)
    v = _matrix(basis)
    torch.testing.assert_close(v @ v.T, torch.eye(3, dtype=torch.float64), atol=1e-6, rtol=0)
    p = torch.stack([_flat({k: x[i] for k, x in public.items()}) for i in range(8)])
    top = torch.linalg.svd(p, full_matrices=False).Vh[:3]
    torch.testing.assert_close(v.T @ v, top.T @ top, atol=1e-5, rtol=0)  # the same projector
    assert top_subspace(cohort(public), 20) is not None and len(top_subspace(cohort(public), 20)["w"]) == 8


def test_the_projection_is_idempotent_orthogonal_and_keeps_a_row_of_the_subspace():
    public = _stacked(4, seed=2)
    basis = top_subspace(cohort(public), 4)
    x = {k: v[0] for k, v in _stacked(1, seed=3).items()}
    once = project_onto(x, basis)
    twice = project_onto(once, basis)
    torch.testing.assert_close(_flat(twice), _flat(once), atol=1e-5, rtol=0)
    residual = _flat(x) - _flat(once)
    assert float((_matrix(basis) @ residual).abs().max()) < 1e-5  # x − VVᵀx ⊥ span(V)
    assert float(_flat(once).norm()) < float(_flat(x).norm())
    inside = {k: 0.7 * v[0] - 2.0 * v[3] for k, v in public.items()}
    torch.testing.assert_close(_flat(project_onto(inside, basis)), _flat(inside), atol=1e-5, rtol=1e-5)


def test_rank_deficient_public_updates_give_their_rank_and_no_public_update_passes_through(ctx):
    public = _stacked(2, seed=4)
    repeated = {k: torch.cat([v, v, 3 * v]) for k, v in public.items()}  # 6 updates spanning 2 directions
    step = project(5)
    like = {k: torch.zeros(s) for k, s in SHAPES.items()}
    private = _stacked(3, seed=5)
    result = step.update(cohort(private), step.init(like), ctx=ctx, public_updates=cohort(repeated))
    assert result.metrics == {"projected": 1.0, "rank": 2.0}
    for public_updates in (None, Cohort([], like)):
        alone = step.update(cohort(private), step.init(like), ctx=ctx, public_updates=public_updates)
        assert alone.metrics == {"projected": 0.0, "rank": 0.0} and alone.outputs["basis"] is None
        assert all(torch.equal(v, private[k]) for k, v in alone.updates.stacked().items())


def test_the_projection_reads_a_column_update_as_its_dense_tensor(ctx):
    like = {k: torch.zeros(s) for k, s in SHAPES.items()}
    public = cohort(_stacked(4, seed=6))
    dense = {"w": torch.zeros(6, 5), "b": torch.randn(5, generator=torch.Generator().manual_seed(7))}
    dense["w"][:, [1, 3]] = torch.randn(6, 2, generator=torch.Generator().manual_seed(8))
    columns = ColumnUpdate(torch.tensor([1, 3]), dense["w"][:, [1, 3]].T.contiguous(), torch.Size((6, 5)))
    step = project(3)
    from_columns = step.update(Cohort([{"w": columns, "b": dense["b"]}], like), {}, ctx=ctx, public_updates=public)
    from_dense = step.update(Cohort([dense], like), {}, ctx=ctx, public_updates=public)
    assert all(torch.equal(v, from_dense.updates.stacked()[k]) for k, v in from_columns.updates.stacked().items())


def test_preconditioned_the_basis_is_of_the_public_updates_divided_by_a(ctx):
    public = _stacked(3, seed=9)
    a = {k: torch.rand(s, generator=torch.Generator().manual_seed(10)) + 0.5 for k, s in SHAPES.items()}
    step = project(3, preconditioned=True)
    like = {k: torch.zeros(s) for k, s in SHAPES.items()}
    row = {k: v[1] / a[k] for k, v in public.items()}  # a public update in the private updates' geometry
    result = step.update(cohort({k: v.unsqueeze(0) for k, v in row.items()}), {}, ctx=ctx,
                         public_updates=cohort(public), preconditioner=a)
    torch.testing.assert_close(_flat({k: v[0] for k, v in result.updates.stacked().items()}), _flat(row),
                               atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="k must be >= 1"):
        project(0)


def test_the_noise_projection_keeps_the_subspace_and_removes_the_rest(ctx):
    basis = top_subspace(cohort(_stacked(3, seed=11)), 3)
    inside = {k: 2.0 * v[0] + v[1] for k, v in basis.items()}
    outside = {k: v[0] for k, v in _stacked(1, seed=12).items()}
    outside = {k: outside[k] - project_onto(outside, basis)[k] for k in SHAPES}
    noisy = {k: inside[k] + outside[k] for k in SHAPES}
    result = project_noise().update(noisy, {}, ctx=ctx, basis=basis)
    torch.testing.assert_close(_flat(result.updates), _flat(inside), atol=1e-5, rtol=1e-5)
    assert project_noise().update(noisy, {}, ctx=ctx, basis=None).updates is noisy
