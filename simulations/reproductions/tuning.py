"""Fair, documented hyper-parameter tuning for the reproductions: a grid search on validation data whose edges grow.

Every method a reproduction compares is tuned the same way (fedpub issue 21, item 2): a small grid per
hyper-parameter (an :class:`Axis`), every point of their product scored by a function that evaluates on
**validation** data only (never the test split), and, when the best value of an axis sits on its grid's edge,
the axis extended one step beyond that edge (a log axis ×/÷ its edge ratio, a linear axis ± its edge step) and the
search run again, at most ``max_extensions`` times. An axis still best on its edge after that is flagged
(:attr:`Tuning.on_edge`). The runs spent (:attr:`Tuning.evaluations`) are the tuning budget; like every
reproduction in fedpub (and the papers), the budget is reported and is **not** counted in ε.

Points already scored are never scored again. A score that is not a finite number (a diverged run) counts as the
worst possible. An axis with a single value is held fixed: it is reported but never extended nor flagged.

**The arms of one claim tune on one grid** (:func:`tune_jointly`, fedpub issue 45): tuned apart, each arm's axes
grow only past its own edge, so arms end on different grids with different budgets, and the difference between them
can be the difference between their grids. Jointly, an axis extended for one arm is extended for every arm, each
arm scores every point of the union grid, and every arm reports the same grid and the same number of points.
:func:`at_low_edge` names the axes whose chosen value is the grid's smallest (a private step tuned down to nothing:
the judge's :class:`~fedpub.simulations.reproductions.judge.PrivateStepOn` gate).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal


@dataclass(frozen=True)
class Axis:
    """One hyper-parameter's grid: its name, its values in increasing order, and how it grows at an edge."""

    name: str
    values: tuple[float, ...]
    scale: Literal["log", "linear"] = "log"

    def __post_init__(self) -> None:
        values = tuple(float(v) for v in self.values)
        object.__setattr__(self, "values", values)
        if not values:
            raise ValueError(f"Axis {self.name!r}: values must name at least one value")
        if self.scale not in ("log", "linear"):
            raise ValueError(f"Axis {self.name!r}: scale must be 'log' or 'linear', got {self.scale!r}")
        if any(b <= a for a, b in itertools.pairwise(values)):
            raise ValueError(f"Axis {self.name!r}: values must be strictly increasing, got {values}")
        if self.scale == "log" and values[0] <= 0:
            raise ValueError(f"Axis {self.name!r}: a log axis needs positive values, got {values}")

    def extended(self, best: float) -> Axis:
        """The axis one step beyond the edge where ``best`` sits (itself when ``best`` is inside or it has one
        value)."""
        v = self.values
        if len(v) < 2 or best not in (v[0], v[-1]):
            return self
        if best == v[-1]:
            beyond = v[-1] * (v[-1] / v[-2]) if self.scale == "log" else v[-1] + (v[-1] - v[-2])
            return Axis(self.name, (*v, beyond), self.scale)
        beyond = v[0] / (v[1] / v[0]) if self.scale == "log" else v[0] - (v[1] - v[0])
        return Axis(self.name, (beyond, *v), self.scale)

    def on_edge(self, best: float) -> bool:
        """Whether ``best`` is the grid's smallest or largest value (never, for a single-value axis)."""
        return len(self.values) > 1 and best in (self.values[0], self.values[-1])


@dataclass(frozen=True)
class Tuning:
    """The outcome of :func:`tune`: the chosen values, their validation score, the budget spent and the flags."""

    best: dict[str, float]
    best_score: float
    evaluations: int
    on_edge: tuple[str, ...]
    grid: dict[str, tuple[float, ...]]
    extensions: int = 0
    scores: dict[tuple[float, ...], float] = field(default_factory=dict, compare=False)
    """Every point scored (values in the axes' order) and its validation score."""

    def markdown(self) -> str:
        """One paragraph for a reproduction's page: grid, chosen values, edge flags, budget, and the ε caveat."""
        grid = "; ".join(f"{name} ∈ {{{', '.join(f'{v:g}' for v in values)}}}" for name, values in self.grid.items())
        chosen = ", ".join(f"{name} = {value:g}" for name, value in self.best.items())
        grown = (f" (the final grid, after {self.extensions} extension{'s' if self.extensions != 1 else ''} past "
                 "an edge)" if self.extensions else "")
        flags = (f" Still on the grid's edge after the extensions (flagged): {', '.join(self.on_edge)}."
                 if self.on_edge else " No chosen value is on its grid's edge.")
        return (f"Grid search over {grid}{grown}; chosen {chosen} (validation score {self.best_score:.4g}).{flags} "
                f"Tuning budget: {self.evaluations} grid points evaluated. Tuning is on validation data and is not "
                "counted in ε.")


def grid_points(axes: Sequence[Axis]) -> list[dict[str, float]]:
    """Every point of the product of ``axes``, in grid order (the last axis fastest), as ``{axis name: value}``."""
    names = [a.name for a in axes]
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(a.values for a in axes))]


def tune(
    axes: Sequence[Axis],
    score: Callable[[Mapping[str, float]], float],
    *,
    higher_is_better: bool,
    max_extensions: int = 2,
) -> Tuning:
    """Grid search of ``score`` (which must evaluate on VALIDATION data only) over the product of ``axes``,
    extending an axis past its edge while its best value sits there, at most ``max_extensions`` times."""
    if not axes:
        raise ValueError("tune: axes must name at least one Axis")
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise ValueError(f"tune: axis names must be distinct, got {names}")
    if max_extensions < 0:
        raise ValueError(f"tune: max_extensions must be ≥ 0, got {max_extensions}")
    scores: dict[tuple[float, ...], float] = {}
    sign = 1.0 if higher_is_better else -1.0

    def ranked(point: Mapping[str, float]) -> float:
        value = scores[tuple(point.values())]
        return sign * value if math.isfinite(value) else -math.inf

    axes = list(axes)
    extensions = 0
    while True:
        grid = grid_points(axes)
        for point in grid:
            key = tuple(point.values())
            if key not in scores:
                scores[key] = float(score(point))
        best = max(grid, key=ranked)  # the first of equal scores, in grid order: deterministic
        edged = [i for i, a in enumerate(axes) if a.on_edge(best[a.name])]
        if not edged or extensions == max_extensions:
            break
        axes = [a.extended(best[a.name]) if i in edged else a for i, a in enumerate(axes)]
        extensions += 1
    return Tuning(
        best=best,
        best_score=scores[tuple(best.values())],
        evaluations=len(scores),
        on_edge=tuple(axes[i].name for i in edged),
        grid={a.name: a.values for a in axes},
        extensions=extensions,
        scores=dict(scores),
    )


def tune_jointly(
    axes: Sequence[Axis],
    scores: Mapping[str, Callable[[Mapping[str, float]], float]],
    *,
    higher_is_better: bool,
    max_extensions: int = 2,
    uses: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Tuning]:
    """Every arm of ``scores`` ({arm: its validation score}) tuned on one grid: the product of ``axes``, an axis
    extended past an edge whenever some arm's best value sits on it (for every arm), at most ``max_extensions``
    times. Each arm's :class:`Tuning` has the same final grid and the same number of evaluations; no point is
    scored twice. ``uses`` ({arm: the names of the axes it has}; an arm not named has every axis): an arm scores
    the product of its own axes only, and an axis grows when the best of an arm that has it sits on its edge (arms
    with different hyper-parameters still share the grid of those they have in common)."""
    if not scores:
        raise ValueError("tune_jointly: scores must name at least one arm")
    if max_extensions < 0:
        raise ValueError(f"tune_jointly: max_extensions must be ≥ 0, got {max_extensions}")
    names = [a.name for a in axes]
    own = {arm: tuple(names) if uses is None or arm not in uses else tuple(uses[arm]) for arm in scores}
    for arm, axis_names in own.items():
        if not axis_names or not set(axis_names) <= set(names):
            raise ValueError(f"tune_jointly: uses[{arm!r}] must name some of the axes {names}, got {list(axis_names)}")
    cached = {arm: _memoised(score) for arm, score in scores.items()}
    axes, extensions = list(axes), 0
    while True:
        tunings = {arm: tune([a for a in axes if a.name in own[arm]], score, higher_is_better=higher_is_better,
                             max_extensions=0)
                   for arm, score in cached.items()}
        edged = {name for t in tunings.values() for name in t.on_edge}
        if not edged or extensions == max_extensions:
            return {arm: replace(t, extensions=extensions) for arm, t in tunings.items()}
        for i, axis in enumerate(axes):
            for t in tunings.values():
                if axis.name in edged and axis.name in t.best and axis.on_edge(t.best[axis.name]):
                    axis = axis.extended(t.best[axis.name])
            axes[i] = axis
        extensions += 1


def _memoised(score: Callable[[Mapping[str, float]], float]) -> Callable[[Mapping[str, float]], float]:
    """``score`` evaluated once per point (a joint tuning asks for each point again at every extension)."""
    seen: dict[tuple[tuple[str, float], ...], float] = {}

    def once(point: Mapping[str, float]) -> float:
        key = tuple(sorted(point.items()))
        if key not in seen:
            seen[key] = score(point)
        return seen[key]

    return once


def at_low_edge(tuning: Tuning, names: Sequence[str]) -> tuple[str, ...]:
    """The axes of ``names`` whose chosen value is the smallest of its final grid (a grid of one value never is)."""
    return tuple(name for name in names
                 if len(tuning.grid[name]) > 1 and tuning.best[name] == tuning.grid[name][0])


def low_edges(arms: Sequence[str], tunings: Mapping[tuple[str, str], Tuning],
              axis: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """For each of ``arms``, per cell, ``axis`` when the tuning it ran at chose that axis's low edge (the private
    step switched off): ``tunings`` is keyed (tuned arm, cell), and an arm ``<arm>@<owner>`` (:func:`at_point`) ran at
    its owner's tuning unless a tuning of its own searched ``axis`` (a shared point where its own step was re-tuned;
    one that tuned another axis at the owner's step reads the owner's). A tuning without ``axis`` has none. What the
    judge's ``PrivateStepOn`` gate reads."""
    edges: dict[str, dict[str, tuple[str, ...]]] = {}
    for arm in arms:
        owner = split_point(arm)[1]
        for cell in dict.fromkeys(cell for _, cell in tunings):
            own = tunings.get((arm, cell))
            ran_at = own if own is not None and axis in own.grid else tunings.get((owner, cell))
            if ran_at is not None:
                edges.setdefault(arm, {})[cell] = at_low_edge(ran_at, (axis,) if axis in ran_at.grid else ())
    return edges


def at_point(arm: str, owner: str) -> str:
    """The name of ``arm`` run at ``owner``'s tuned values instead of its own (a claim judged at a shared point)."""
    return f"{arm}@{owner}"


def split_point(name: str) -> tuple[str, str]:
    """(the arm run, the arm whose tuned values it ran at) of a name :func:`at_point` made; a plain arm ran at its
    own."""
    arm, _, owner = name.partition("@")
    return arm, owner or arm
