"""Pure maths on tensor dicts (``dict[str, Tensor]``); nothing here mutates its inputs.

The row functions (:func:`num_rows`, :func:`row_norms`, :func:`scale_rows`, :func:`map_rows`, :func:`row_zeros`,
:func:`sum_rows`) take stacked dicts or :class:`~fedpub.rows.UpdateRows`, which they serve without stacking
the rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from fedpub.rows import UpdateRows, scale_leading

Tree = dict[str, torch.Tensor]


def map_tree(fn: Callable[[torch.Tensor], torch.Tensor], tree: Tree) -> Tree:
    """Apply ``fn`` to every tensor."""
    return {k: fn(v) for k, v in tree.items()}


def _check_keys(a: Tree, b: Tree) -> None:
    if a.keys() != b.keys():
        raise KeyError(f"tensor dicts have different keys: {sorted(a)} vs {sorted(b)}")


def add(a: Tree, b: Tree) -> Tree:
    _check_keys(a, b)
    return {k: a[k] + b[k] for k in a}


def sub(a: Tree, b: Tree) -> Tree:
    _check_keys(a, b)
    return {k: a[k] - b[k] for k in a}


def scale(a: Tree, factor: float | torch.Tensor) -> Tree:
    return {k: v * factor for k, v in a.items()}


def zeros_like(a: Tree) -> Tree:
    return {k: torch.zeros_like(v) for k, v in a.items()}


def clone(a: Tree) -> Tree:
    return {k: v.detach().clone() for k, v in a.items()}


def global_norm(a: Tree) -> torch.Tensor:
    """The L2 norm of all tensors taken together as one vector."""
    squares = [v.double().pow(2).sum() for v in a.values()]
    return torch.stack(squares).sum().sqrt() if squares else torch.zeros((), dtype=torch.float64)


def stack(trees: Sequence[Tree]) -> Tree:
    """Stack trees with equal keys into one tree with a leading dimension (one row per tree)."""
    if not trees:
        raise ValueError("cannot stack an empty sequence of tensor dicts")
    for t in trees[1:]:
        _check_keys(trees[0], t)
    return {k: torch.stack([t[k] for t in trees]) for k in trees[0]}


def unstack(stacked: Tree) -> list[Tree]:
    """Inverse of :func:`stack`."""
    n = num_rows(stacked)
    return [{k: v[i] for k, v in stacked.items()} for i in range(n)]


def num_rows(stacked: Tree | UpdateRows) -> int:
    """The leading dimension of a stacked tree (0 for an empty tree)."""
    if isinstance(stacked, UpdateRows):
        return stacked.num_rows
    sizes = {v.shape[0] for v in stacked.values()}
    if len(sizes) > 1:
        raise ValueError(f"stacked tensors disagree on the leading dimension: {sorted(sizes)}")
    return sizes.pop() if sizes else 0


def row_norms(stacked: Tree | UpdateRows) -> torch.Tensor:
    """Per-row global L2 norms of a stacked tree, shape ``(rows,)``, float64: each tensor's row norms in its
    own dtype (``vector_norm``'s blocked sums: float32's relative error, ~1e-7; no float64 copy of the
    updates), combined in float64."""
    if isinstance(stacked, UpdateRows):
        return stacked.row_norms()
    norms = [torch.linalg.vector_norm(v.flatten(start_dim=1), dim=1).double() for v in stacked.values()]
    return torch.stack(norms).pow(2).sum(dim=0).sqrt()


def scale_rows(stacked: Tree | UpdateRows, factors: torch.Tensor) -> Tree | UpdateRows:
    """Multiply row i of every tensor by ``factors[i]`` (of :class:`UpdateRows`: recorded, nothing copied)."""
    if isinstance(stacked, UpdateRows):
        return stacked.scaled(factors)
    return {k: scale_leading(v, factors) for k, v in stacked.items()}


def map_rows(fn: Callable[[Tree], Tree], stacked: Tree | UpdateRows) -> Tree | UpdateRows:
    """``fn`` applied to every row; ``fn`` must be elementwise, any other tree in it broadcasting over rows
    (``lambda row: sub(row, center)``), so that on a stacked tree it is applied to all rows at once."""
    if isinstance(stacked, UpdateRows):
        return stacked.map(fn)
    return fn(stacked)


def row_zeros(stacked: Tree | UpdateRows) -> Tree:
    """Zeros shaped like one row."""
    if isinstance(stacked, UpdateRows):
        return stacked.zeros()
    return {k: v.new_zeros(v.shape[1:]) for k, v in stacked.items()}


def sum_rows(stacked: Tree | UpdateRows) -> Tree:
    if isinstance(stacked, UpdateRows):
        return stacked.row_sum()
    return {k: v.sum(dim=0) for k, v in stacked.items()}


def mean(trees: Sequence[Tree]) -> Tree:
    return {k: v.mean(dim=0) for k, v in stack(trees).items()}
