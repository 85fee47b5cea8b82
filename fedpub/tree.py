"""Pure maths on tensor dicts (``dict[str, Tensor]``), one update or model at a time; nothing here mutates its
inputs. A cohort's rows have their own type, :class:`~fedpub.cohort_updates.Cohort`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

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


def mean(trees: Sequence[Tree]) -> Tree:
    """The mean of trees with equal keys, tensor by tensor."""
    if not trees:
        raise ValueError("cannot average an empty sequence of tensor dicts")
    for t in trees[1:]:
        _check_keys(trees[0], t)
    return {k: torch.stack([t[k] for t in trees]).mean(dim=0) for k in trees[0]}
