"""One judge for the reproductions' claims: regime gates first, then a difference, its 95 % CI, and one of four
outcomes (fedpub issue 36).

**Input: a plain structure.** The figures a reproduction measured are a :data:`Results` mapping
``{arm: {cell: {pairing key: value}}}``: per arm (a method, a control), per cell of its grid (``"ε=2"``,
``"hinge ε=1"``; :data:`ANY` for a control run once for every cell, counted once), the per-seed metric values
keyed by what pairs them (the seed: arms run with one seed share its data draw, cohorts and noise stream). The
tuning landscapes are :data:`Landscapes`, ``{arm: {cell or ANY: [validation score of each tuning point]}}``. A
:class:`Claim` names the arms compared (``better`` beats ``worse``), the direction (``higher_is_better``), the
paper's effect (``paper_effect``: better − worse in the claimed direction, in the metric's units; the smallest the
paper reports), whether the arms share data (``paired``), an optional declared ``primary`` cell, and its
:data:`Gate`\\ s. :func:`judge_claim` judges one claim; :meth:`ClaimJudgement.sentence` says it.

**Gates, before any verdict.** Each gate is checked in each cell: :class:`Beats` (the best private arm beats
public-only, the warm start, or a constant such as the majority predictor, by a stated margin), :class:`Headroom`
(non-private training stays a stated number of points above the best private arm), :class:`NotDegenerate` (no arm
diverged or sits at chance), :class:`NotFlat` (every tuned arm's validation scores span a stated range),
:class:`AtLeast` (a regime measure recorded beside the arms, e.g. the share of chains in which cold private training
misses the right basin, reaches a stated floor: the mechanism has something to act on). A cell
failing a gate is **not testable** there, with the gate and its numbers; a claim with no testable cell is
published as ``not testable: <gate, with the numbers>``, never with a verdict.

**The test in a testable cell.** The difference d = better − worse (sign-flipped when lower is better). Arms that
share data (``paired``) are compared by a paired t on the per-seed differences (the pairing keys must match);
others by Welch's t (Welch–Satterthwaite degrees of freedom). A cell with fewer than :data:`MIN_SEEDS` seeds a
side, a non-finite value, or zero variance (every seed gives the same difference: t is undefined) is not judged,
with the reason. Each cell reports d, its 95 % CI, and a two-sided p-value; the p-values of a claim's cells are
Holm-corrected together (family-wise α = :data:`ALPHA`), or the declared primary cell is judged alone.

**Six outcomes** (fedpub issue 45: one word for one thing). In each tested cell: *supports* when d is significantly
above zero, *contradicts* when it is significantly below (a sign reversal, never anything else), *smaller than the
paper's effect* when neither and the CI lies below the paper's effect — published only where the claim argues
that the paper's effect size transfers to this regime (``effect_transfers``); otherwise *inconclusive*. A claim
whose cells are significant with both signs is *mixed*; one with significant cells of one sign takes that sign's
word; else *smaller than the paper's effect* when a cell says so; else *inconclusive*, with the power a cell had
to detect the paper's effect (noncentral t at the first Holm threshold α/k, the best cell's); *not testable* when
no cell passed its gates. A significant verdict at under 50 % power says beside it that the effect seen is not the
paper's size. A claim the paper makes of **every** cell ("at every p": ``every``) is an intersection–union test:
each cell is tested at α (no Holm), and it supports only when every testable cell does. Paired cells also report
an exact sign-flip permutation p-value (:meth:`Difference.sign_flip_p`), a robustness check where the seeds'
outcomes are bimodal and a t-test's normality is doubtful.

**Gates about the mechanism** (issue 45): :class:`DistinctMechanisms` (two arms that run one mechanism at two
hyperparameter points measure a tuning outcome, not the mechanism), :class:`PrivateStepOn` (a tuned private step at
its grid's low edge, or private rounds improving their own start by less than a margin: private training was
switched off), :class:`Stable` (the loss finite and below a ceiling on every seed) and :class:`MechanismRegime`
(a claim about a non-convex mechanism, e.g. basin choice, on a convex model). Gates take non-zero margins.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

import numpy as np
from scipy import stats

ANY = "*"
"""The cell of an arm run once for every cell (a control that does not depend on ε): compared in each of the other
arm's cells, its seeds counted once (never copied per cell)."""
MIN_SEEDS = 3
"""Fewer seeds a side give no usable standard error: such a cell is not judged."""
ALPHA = 0.05
"""The family-wise error rate of a claim's cells (Holm) and 1 − the CIs' level."""
SIGN_FLIP_EXACT = 20
"""The most seeds of an exact sign-flip test (2^20 sign patterns)."""
SIGN_FLIP_DRAWS = 2**20
"""Random sign patterns of the sign-flip test beyond :data:`SIGN_FLIP_EXACT` seeds (its p within about ±0.001 at
p = 0.05)."""

Results = Mapping[str, Mapping[str, Mapping[Hashable, float]]]
"""{arm: {cell (or :data:`ANY`): {pairing key (the seed): metric value}}}."""
Landscapes = Mapping[str, Mapping[str, Sequence[float]]]
"""{arm: {cell (or :data:`ANY`): validation scores of every tuning point}}."""
Outcome = Literal["supports", "contradicts", "mixed", "smaller than the paper's effect", "inconclusive",
                  "not testable"]
OUTCOMES: tuple[Outcome, ...] = ("supports", "contradicts", "mixed", "smaller than the paper's effect",
                                 "inconclusive", "not testable")
SMALLER: Outcome = "smaller than the paper's effect"
LOW_POWER = 0.5
"""A significant verdict at under this power to detect the paper's effect saw an effect not of the paper's size."""

RULE = (
    "Before any verdict each cell passes the reproduction's regime gates (the best private arm beats public-only or "
    "the warm start and the trivial predictor by a non-zero margin, headroom to non-private training, no arm "
    "diverged or at chance, a tuning landscape that is not flat, the private step not switched off by the tuning, "
    "a stable loss, arms that differ in their mechanism and not only in a hyperparameter point, a model on which "
    "the claimed mechanism can act); a cell failing one is not testable, with the gate's numbers. In a testable cell "
    "the difference d (claimed-better minus the other) gets a 95 % CI and a two-sided p-value: a paired t on the "
    "per-seed differences where the arms share seeds, Welch's t otherwise, and for paired arms a sign-flip "
    f"permutation p beside it; a cell with under {MIN_SEEDS} seeds, a non-finite value or zero variance is not "
    f"judged. The cells of a claim are Holm-corrected together (α = {ALPHA:g}), or one declared primary cell is "
    "judged alone; a claim made of every cell (\"at every p\") is an intersection–union test, each cell at α, and "
    "supports only when every testable cell does. A claim **supports** when its significant cells are positive, "
    "**contradicts** when they are negative (a significant sign reversal, nothing else), is **mixed** when they "
    "have both signs, **smaller than the paper's effect** when (else) a cell's CI lies below the paper's effect "
    "and the claim argues why that effect's size transfers here, **inconclusive** otherwise (with its power at the "
    "paper's effect), and **not testable** when no cell passed its gates. A significant verdict at under "
    f"{LOW_POWER:.0%} power says that the effect seen is not the paper's size."
)
"""The rule in one paragraph, for a reproduction's ``comparison.md`` and the results page."""


@dataclass(frozen=True)
class Estimate:
    """A method's figure in one cell: the mean over ``n`` seeds and its standard error."""

    mean: float
    se: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Estimate:
        """The estimate from the seeds' figures (NaN where one is not finite: a diverged run)."""
        values = [float(v) for v in values]
        if not all(math.isfinite(v) for v in values):
            return cls(math.nan, math.nan, len(values))
        sd = statistics.stdev(values) if len(values) > 1 else math.nan
        return cls(statistics.fmean(values), sd / math.sqrt(len(values)), len(values))

    def __str__(self) -> str:
        return f"{self.mean:.4f} ± {self.se:.4f} (n={self.n})"


@dataclass(frozen=True)
class Difference:
    """better − worse in one cell, in the claimed direction: its estimate, standard error, degrees of freedom and
    test; ``withheld`` says why the cell is not judged (empty: it is); ``paired_diffs``: a paired test's per-seed
    differences (for the sign-flip test)."""

    cell: str
    better: Estimate
    worse: Estimate
    diff: float
    se: float
    dof: float
    test: Literal["paired t", "Welch"]
    withheld: str = ""
    paired_diffs: tuple[float, ...] = ()

    def ci(self, alpha: float = ALPHA) -> tuple[float, float]:
        """The two-sided (1 − α) confidence interval of the difference."""
        half = float(stats.t.ppf(1 - alpha / 2, self.dof)) * self.se
        return self.diff - half, self.diff + half

    def p_value(self, null: float = 0.0) -> float:
        """The two-sided p-value of "the difference is ``null``"."""
        return float(2 * stats.t.sf(abs(self.diff - null) / self.se, self.dof))

    def sign_flip_p(self) -> float | None:
        """The two-sided p-value of a sign-flip permutation test of "the paired differences are symmetric about
        zero" (its statistic the mean; None for an unpaired test): exact over every one of the 2^n sign patterns up
        to :data:`SIGN_FLIP_EXACT` seeds, beyond that on :data:`SIGN_FLIP_DRAWS` seeded random patterns,
        (1 + hits) / (1 + draws), which never understates p. It assumes no normality, so it stays right where the
        seeds' outcomes are bimodal."""
        if not self.paired_diffs:
            return None
        diffs = np.asarray(self.paired_diffs)
        if len(diffs) > SIGN_FLIP_EXACT:
            return _sampled_sign_flip_p(diffs)
        half = len(diffs) // 2  # every pattern's sum as one half's sums plus the other's: 2^n values, 2·2^(n/2) rows
        sums = _signed_sums(diffs[:half])[:, None] + _signed_sums(diffs[half:])[None, :]
        return float(np.mean(np.abs(sums) >= abs(diffs.sum()) - 1e-12))

    def power(self, effect: float, alpha: float) -> float:
        """The chance a two-sided level-α test finds the difference when it is ``effect`` (noncentral t)."""
        critical, shift = float(stats.t.ppf(1 - alpha / 2, self.dof)), effect / self.se
        tails = (float(stats.nct.sf(critical, self.dof, shift)), float(stats.nct.cdf(-critical, self.dof, shift)))
        return sum(t for t in tails if math.isfinite(t))  # scipy gives nan for a tail far beyond the shift: mass 0


def _sampled_sign_flip_p(diffs: np.ndarray) -> float:
    """The sign-flip p-value on :data:`SIGN_FLIP_DRAWS` random sign patterns (a fixed seed: the same differences
    give the same p), drawn in blocks."""
    rng, observed, hits, block = np.random.default_rng(0), abs(diffs.sum()) - 1e-12, 0, 2**16
    for _ in range(SIGN_FLIP_DRAWS // block):
        signs = rng.integers(0, 2, size=(block, len(diffs))) * 2 - 1
        hits += int(np.count_nonzero(np.abs(signs @ diffs) >= observed))
    return (1 + hits) / (1 + SIGN_FLIP_DRAWS)


def _signed_sums(values: np.ndarray) -> np.ndarray:
    """The sum of ``values`` under every one of the 2^n sign patterns."""
    signs = 1 - 2 * ((np.arange(2 ** len(values))[:, None] >> np.arange(len(values))) & 1)
    return signs @ values


def _sign(higher_is_better: bool) -> float:
    return 1.0 if higher_is_better else -1.0


def _unjudgeable(values: Sequence[float]) -> str:
    if len(values) < MIN_SEEDS:
        return f"not judged: under {MIN_SEEDS} seeds ({len(values)})"
    if not all(math.isfinite(v) for v in values):
        return "not judged: a value is not finite (a diverged run)"
    return ""


def welch_difference(cell: str, better: Sequence[float], worse: Sequence[float], *,
                     higher_is_better: bool = True) -> Difference:
    """The difference of two arms that share no data: Welch's t with Welch–Satterthwaite degrees of freedom."""
    b, w = Estimate.of(better), Estimate.of(worse)
    diff = _sign(higher_is_better) * (b.mean - w.mean)
    withheld = _unjudgeable(better) or _unjudgeable(worse)
    se = math.hypot(b.se, w.se) if not withheld else math.nan
    if not withheld and se == 0:
        withheld = (f"not judged: zero variance (every seed gives {b.mean:.4f} and {w.mean:.4f}: no t-test can "
                    "tell them apart)")
    dof = se**4 / sum(e.se**4 / (e.n - 1) for e in (b, w) if e.se > 0) if not withheld else math.nan
    return Difference(cell, b, w, diff, se, dof, "Welch", withheld)


def paired_difference(cell: str, better: Mapping[Hashable, float], worse: Mapping[Hashable, float], *,
                      higher_is_better: bool = True) -> Difference:
    """The difference of two arms that share each seed's data: a paired t on the per-seed differences. The pairing
    keys must be the same on both sides."""
    if set(better) != set(worse):
        raise ValueError(f"cell {cell!r}: a paired test needs the same seeds on both sides, got {sorted(better)} and "
                         f"{sorted(worse)}; declare the claim paired=False if the arms share no data")
    keys = list(better)
    diffs = [_sign(higher_is_better) * (better[k] - worse[k]) for k in keys]
    b, w = Estimate.of([better[k] for k in keys]), Estimate.of([worse[k] for k in keys])
    withheld = _unjudgeable(diffs)
    d = Estimate.of(diffs) if not withheld else Estimate(math.nan, math.nan, len(diffs))
    if not withheld and d.se == 0:
        withheld = f"not judged: zero variance (every seed's difference is {d.mean:+.4f}: t is undefined)"
    return Difference(cell, b, w, statistics.fmean(diffs) if diffs else math.nan, d.se, len(diffs) - 1, "paired t",
                      withheld, tuple(diffs))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (a cell is significant when its adjusted p ≤ :data:`ALPHA`)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [math.nan] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _mean(results: Results, arm: str, cell: str) -> list[float] | None:
    """The seeds' values of ``arm`` in ``cell`` (its :data:`ANY` cell otherwise); None when it did not run there."""
    if arm not in results:
        raise ValueError(f"a gate or claim names the arm {arm!r}, which has no results; the arms are {sorted(results)}")
    found = results[arm].get(cell, results[arm].get(ANY))
    return None if found is None else [float(v) for v in found.values()]


def _reference(results: Results, reference: str | float, cell: str) -> float | None:
    if isinstance(reference, str):
        values = _mean(results, reference, cell)
        return None if values is None else statistics.fmean(values)
    return float(reference)


def _best_against(results: Results, arms: Sequence[str], reference: str | float, cell: str,
                  higher_is_better: bool) -> tuple[tuple[str, float], float, float] | str:
    """((the best of ``arms``, its mean), the reference's figure, best − reference in the better direction), or why
    there is none."""
    sign = _sign(higher_is_better)
    means = {arm: statistics.fmean(v) for arm in arms if (v := _mean(results, arm, cell))}
    means = {arm: mean for arm, mean in means.items() if math.isfinite(mean)}
    ref = _reference(results, reference, cell)
    if not means or ref is None:
        return f"no finite arm or no reference in {cell}"
    best = max(means.items(), key=lambda item: sign * item[1])
    return best, ref, sign * (best[1] - ref)


@dataclass(frozen=True)
class Beats:
    """Gate: the best of ``arms`` beats ``reference`` (an arm, e.g. public-only or the warm start, or a constant,
    e.g. the majority predictor's accuracy; named ``what``) by at least ``margin``."""

    arms: tuple[str, ...]
    reference: str | float
    margin: float
    what: str
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        _positive(self.margin, f"Beats {self.what!r}")

    def check(self, results: Results, cell: str, landscapes: Landscapes) -> str:
        found = _best_against(results, self.arms, self.reference, cell, self.higher_is_better)
        if isinstance(found, str):
            return f"gate 'beats {self.what}': {found}"
        (arm, best), ref, gap = found
        if gap >= self.margin:
            return ""
        return (f"gate 'the best private arm beats {self.what} by {self.margin:g}' failed: {arm} {best:.4f} "
                f"vs {self.what} {ref:.4f}, a gap of {gap:+.4f}")


@dataclass(frozen=True)
class Headroom:
    """Gate: ``ceiling`` (non-private training: an arm or a constant) is at least ``points`` better than the best of
    ``arms`` (a comparison at the ceiling cannot show a method's gain)."""

    arms: tuple[str, ...]
    ceiling: str | float
    points: float
    what: str = "non-private training"
    higher_is_better: bool = True

    def check(self, results: Results, cell: str, landscapes: Landscapes) -> str:
        found = _best_against(results, self.arms, self.ceiling, cell, self.higher_is_better)
        if isinstance(found, str):
            return f"gate 'headroom to {self.what}': {found}"
        (arm, best), top, gap = found
        if -gap >= self.points:
            return ""
        return (f"gate 'headroom to {self.what} ≥ {self.points:g}' failed: {self.what} {top:.4f} vs the best "
                f"private arm {arm} {best:.4f}, headroom {-gap:+.4f}")


@dataclass(frozen=True)
class NotDegenerate:
    """Gate: none of ``arms`` diverged (a non-finite value) or sits within ``margin`` of ``chance`` (the trivial
    predictor's figure, or the arm recording it: a claim between two arms at chance says nothing)."""

    arms: tuple[str, ...]
    chance: str | float
    margin: float
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        _positive(self.margin, "NotDegenerate")

    def check(self, results: Results, cell: str, landscapes: Landscapes) -> str:
        failed = []
        chance = _reference(results, self.chance, cell)
        if chance is None:
            return f"gate 'no arm within {self.margin:g} of chance': no {self.chance} in {cell}"
        for arm in self.arms:
            values = _mean(results, arm, cell)
            if values is None:
                continue
            if not all(math.isfinite(v) for v in values):
                failed.append(f"{arm} diverged (a non-finite value)")
            elif _sign(self.higher_is_better) * (statistics.fmean(values) - chance) < self.margin:
                failed.append(f"{arm} at chance ({statistics.fmean(values):.4f}, chance {chance:.4f})")
        return (f"gate 'no arm diverged or within {self.margin:g} of chance' failed: " + "; ".join(failed)
                if failed else "")


@dataclass(frozen=True)
class NotFlat:
    """Gate: the validation scores of each of ``arms``' tuning points span at least ``spread`` (a flat landscape
    means nothing the tuning tried mattered: a choice on it is noise)."""

    arms: tuple[str, ...]
    spread: float

    def check(self, results: Results, cell: str, landscapes: Landscapes) -> str:
        failed = []
        for arm in self.arms:
            scores = landscapes.get(arm, {}).get(cell, landscapes.get(arm, {}).get(ANY))
            finite = [s for s in scores or () if math.isfinite(s)]
            if len(finite) < 2:
                failed.append(f"{arm} has no tuning landscape here ({len(finite)} finite scores)")
            elif (span := max(finite) - min(finite)) < self.spread:
                failed.append(f"{arm}'s {len(finite)} validation scores span {span:.4f}")
        return f"gate 'tuning landscape spans ≥ {self.spread:g}' failed: " + "; ".join(failed) if failed else ""


@dataclass(frozen=True)
class AtLeast:
    """Gate: the regime measure recorded in the results as the arm ``measure`` (not a method: e.g. the share of
    chains in which cold private training misses the right basin) averages at least ``floor`` over the cell's
    seeds (named ``what``): where it does not, the mechanism a claim tests has nothing to act on."""

    measure: str
    floor: float
    what: str

    def check(self, results: Results, cell: str, landscapes: Landscapes) -> str:
        values = _mean(results, self.measure, cell)
        if values is None:
            return f"gate '{self.what} ≥ {self.floor:g}': no {self.measure} in {cell}"
        mean = statistics.fmean(values)
        if mean >= self.floor:
            return ""
        return f"gate '{self.what} ≥ {self.floor:g}' failed: {self.measure} {mean:.4f}"


def _positive(margin: float, gate: str) -> None:
    if not margin > 0:
        raise ValueError(f"{gate}: margin must be > 0 (a margin of 0 lets noise pass a gate), got {margin!r}")


def _at(table: Mapping[str, Mapping[str, object]], arm: str, cell: str) -> object:
    """``table[arm]``'s entry for ``cell`` (its :data:`ANY` entry otherwise), or None."""
    by_cell = table.get(arm, {})
    return by_cell.get(cell, by_cell.get(ANY))


@dataclass(frozen=True)
class DistinctMechanisms:
    """Gate: the claim's two ``arms`` run different mechanisms. ``designs``: each arm's settings other than its
    tuned hyperparameters (the recipe and its switches). Arms of equal designs differ only in their tuned points
    (``points``: {arm: {cell or :data:`ANY`: {hyperparameter: value}}}), so their difference is a tuning outcome,
    which says nothing about a mechanism."""

    arms: tuple[str, str]
    designs: Mapping[str, Mapping[str, Hashable]]
    points: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)

    def check(self, results: Results, cell: str, landscapes: Landscapes) -> str:
        missing = [arm for arm in self.arms if arm not in self.designs]
        if missing:
            return f"gate 'the arms differ in their mechanism': no design for {missing}"
        first, second = self.arms
        if dict(self.designs[first]) != dict(self.designs[second]):
            return ""
        design = ", ".join(f"{k} {v}" for k, v in sorted(self.designs[first].items())) or "no setting"
        points = "; ".join(f"{arm} at {_at(self.points, arm, cell) or 'an untold point'}" for arm in self.arms)
        return (f"gate 'the arms differ in their mechanism' failed: {first} and {second} run one mechanism "
                f"({design}) and differ only in their hyperparameter points ({points}): a tuning outcome")


@dataclass(frozen=True)
class PrivateStepOn:
    """Gate: the tuning left each of ``arms``' private step on. ``at_low_edge``: {arm: {cell or :data:`ANY`:
    the private step's axes (e.g. ``("server_lr",)``) whose tuned value sits at the low edge of its grid}};
    ``starts``: {arm: the arm recording the figure it starts from (round 0: its warm start)}, which it must improve
    on by at least ``margin``. A private step tuned down to nothing, or private rounds that leave their start where
    it was, mean private training was switched off: a claim about it is not testable there."""

    arms: tuple[str, ...]
    at_low_edge: Mapping[str, Mapping[str, Sequence[str]]] = field(default_factory=dict)
    starts: Mapping[str, str] = field(default_factory=dict)
    margin: float = 0.01
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        _positive(self.margin, "PrivateStepOn")

    def check(self, results: Results, cell: str, landscapes: Landscapes) -> str:
        failed = []
        for arm in self.arms:
            edges = _at(self.at_low_edge, arm, cell)
            if edges:
                failed.append(f"{arm}'s tuned private step is at its grid's low edge ({', '.join(edges)})")
            start = self.starts.get(arm)
            values = None if start is None else _mean(results, arm, cell)  # only a start's comparison reads results
            if values is None:
                continue
            reference = _reference(results, start, cell)
            gain = (math.nan if reference is None else
                    _sign(self.higher_is_better) * (statistics.fmean(values) - reference))
            if not gain >= self.margin:
                failed.append(f"{arm} improves its start {start} by {gain:+.4f}")
        return (f"gate 'private training is on (not at the low edge, ≥ {self.margin:g} past its start)' failed "
                "(the private step was switched off): " + "; ".join(failed) if failed else "")


@dataclass(frozen=True)
class Stable:
    """Gate: each arm's loss, recorded in the results as the measure ``losses[arm]`` (per seed), is finite on every
    seed and at most ``ceiling`` (e.g. the trivial predictor's loss): a loss above it exploded."""

    losses: Mapping[str, str]
    ceiling: float

    def check(self, results: Results, cell: str, landscapes: Landscapes) -> str:
        failed = []
        for arm, measure in self.losses.items():
            values = _mean(results, measure, cell)
            if values is None:
                continue
            if not all(math.isfinite(v) for v in values):
                failed.append(f"{arm}'s loss is not finite on some seed")
            elif max(values) > self.ceiling:
                failed.append(f"{arm}'s loss reaches {max(values):.4g}")
        return (f"gate 'a stable loss (finite, ≤ {self.ceiling:g} on every seed)' failed: " + "; ".join(failed)
                if failed else "")


@dataclass(frozen=True)
class MechanismRegime:
    """Gate: the claim's ``mechanism`` (e.g. "basin choice") needs a model of kind ``needs`` (e.g. "non-convex");
    the reproduction's model is ``model``. Where they differ the mechanism cannot act: no cell is testable."""

    mechanism: str
    needs: str
    model: str

    def check(self, results: Results, cell: str, landscapes: Landscapes) -> str:
        if self.needs == self.model:
            return ""
        return (f"gate 'a model on which {self.mechanism} can act' failed: it needs a {self.needs} model, the "
                f"reproduction's is {self.model}")


Gate = (Beats | Headroom | NotDegenerate | NotFlat | AtLeast | DistinctMechanisms | PrivateStepOn | Stable
        | MechanismRegime)


@dataclass(frozen=True)
class Claim:
    """``better`` beats ``worse`` (the paper's words in ``text``, its own figure in ``paper_figure``).
    ``paper_effect``: the paper's effect, better − worse in the claimed direction in the metric's units (None: the
    paper gives none; an inconclusive claim then has no power to report). ``paired``: the arms share each seed's
    data (a paired t). ``primary``: the one cell judged (no correction); None: every cell where both ran, Holm.
    ``every``: the paper claims it of every cell, so every testable cell must support it. ``gates``: this claim's
    own, checked with the reproduction's. ``effect_transfers``: why the paper's effect size carries over to this
    regime (data, model, privacy unit); only then may a CI below it be published as "smaller than the paper's
    effect" (empty: the paper's effect only sizes the power)."""

    text: str
    better: str
    worse: str
    paper_figure: str = ""
    paper_effect: float | None = None
    higher_is_better: bool = True
    paired: bool = True
    primary: str | None = None
    every: bool = False
    gates: tuple[Gate, ...] = ()
    effect_transfers: str = ""


@dataclass(frozen=True)
class CellJudgement:
    """One cell of a claim: its difference, its p-value (Holm-adjusted within the claim, or at α alone in an
    intersection–union test: ``holm`` False) and its outcome."""

    difference: Difference
    p: float
    outcome: Outcome
    holm: bool = True

    @property
    def cell(self) -> str:
        return self.difference.cell

    def __str__(self) -> str:
        d = self.difference
        if d.withheld:
            return f"{d.cell}: {d.better} vs {d.worse}, {d.withheld}"
        low, high = d.ci()
        flip = d.sign_flip_p()
        robust = "" if flip is None else f", sign-flip p {flip:.3g}"
        return (f"{d.cell}: {d.better} vs {d.worse}, d = {d.diff:+.4f} [95 % CI {low:+.4f}, {high:+.4f}] "
                f"({d.test}, df {d.dof:.1f}, {'Holm p' if self.holm else 'p'} {self.p:.3g}{robust}: {self.outcome})")


@dataclass(frozen=True)
class ClaimJudgement:
    """A claim judged over its cells (see the module docstring for the rule); ``every``: claimed of every cell (an
    intersection–union test); ``effect_transfers``: the claim's argument that the paper's effect size applies."""

    differences: tuple[Difference, ...]
    paper_effect: float | None = None
    every: bool = False
    effect_transfers: str = ""

    def _adjusted(self, tested: Sequence[Difference], null: float) -> list[float]:
        """The cells' p-values of "d = ``null``": each at α for a claim of every cell, else Holm-adjusted."""
        p_values = [d.p_value(null) for d in tested]
        return p_values if self.every else holm(p_values)

    @cached_property
    def cells(self) -> tuple[CellJudgement, ...]:
        tested = [d for d in self.differences if not d.withheld]
        zero = dict(zip((id(d) for d in tested), self._adjusted(tested, 0.0), strict=True))
        at_effect = (dict(zip((id(d) for d in tested), self._adjusted(tested, self.paper_effect), strict=True))
                     if self.paper_effect is not None and self.effect_transfers else {})
        judged = []
        for d in self.differences:
            if d.withheld:
                outcome: Outcome = "not testable"
            elif zero[id(d)] <= ALPHA:
                outcome = "supports" if d.diff > 0 else "contradicts"
            elif at_effect.get(id(d), 1.0) <= ALPHA and d.diff < self.paper_effect:
                outcome = SMALLER
            else:
                outcome = "inconclusive"
            judged.append(CellJudgement(d, zero.get(id(d), math.nan), outcome, not self.every))
        return tuple(judged)

    @property
    def outcome(self) -> Outcome:
        outcomes = [c.outcome for c in self.cells if c.outcome != "not testable"]
        if not outcomes:
            return "not testable"
        positive, negative = "supports" in outcomes, "contradicts" in outcomes
        if positive and negative:
            return "mixed"
        if negative:
            return "contradicts"
        if positive and (not self.every or all(o == "supports" for o in outcomes)):
            return "supports"
        return SMALLER if SMALLER in outcomes else "inconclusive"

    @property
    def power(self) -> float | None:
        """The best tested cell's power at the paper's effect (the weakest's for a claim of every cell, each cell at
        α), at the first Holm threshold (None: no effect given or no tested cell)."""
        tested = [d for d in self.differences if not d.withheld]
        if self.paper_effect is None or not tested:
            return None
        if self.every:
            return min(d.power(self.paper_effect, ALPHA) for d in tested)
        return max(d.power(self.paper_effect, ALPHA / len(tested)) for d in tested)

    @property
    def verdict(self) -> str:
        """The outcome as published: with its power when inconclusive, its gates' numbers when not testable."""
        if self.outcome == "not testable":
            return "not testable: " + ("; ".join(f"{d.cell}: {d.withheld}" for d in self.differences)
                                       or "no cell where both arms ran")
        power = self.power
        if self.outcome == "inconclusive":
            return ("inconclusive (no paper's effect given: power not computed)" if power is None else
                    f"inconclusive (power {power:.0%} at the paper's effect)")
        if self.outcome in ("supports", "contradicts", "mixed") and power is not None and power < LOW_POWER:
            return f"{self.outcome} (power {power:.0%} at the paper's effect: the effect seen is not the paper's size)"
        return self.outcome

    def ci_text(self) -> str:
        """Each tested cell's difference and 95 % CI, beside the paper's effect."""
        tested = [d for d in self.differences if not d.withheld]
        cells = "; ".join(f"{d.cell}: {d.diff:+.4f} [{d.ci()[0]:+.4f}, {d.ci()[1]:+.4f}]" for d in tested)
        effect = "none given" if self.paper_effect is None else f"{self.paper_effect:+g}"
        return f"{cells or 'no tested cell'} (paper's effect {effect})"

    def gates_text(self) -> str:
        """Which cells passed their gates, and the numbers of each that did not."""
        failed = [f"{d.cell}: {d.withheld}" for d in self.differences if d.withheld]
        passed = len(self.differences) - len(failed)
        return f"{passed} of {len(self.differences)} cells testable" + (f"; {'; '.join(failed)}" if failed else "")

    def sentence(self, text: str, better: str, worse: str) -> str:
        """A markdown bullet: the claim, its outcome, and every cell's figures."""
        tested = sum(not d.withheld for d in self.differences)
        family = ("" if tested < 2 else f", each of {tested} cells at α (intersection–union), each must support"
                  if self.every else f", Holm over {tested} cells")
        transfer = f"; the paper's effect applies here because {self.effect_transfers}" if self.effect_transfers else ""
        return (f"- {text}: **{self.verdict}** — `{better}` vs `{worse}`{family}; paper's effect "
                f"{'none given' if self.paper_effect is None else f'{self.paper_effect:+g}'}; "
                + "; ".join(str(c) for c in self.cells) + transfer)


def judge_claim(claim: Claim, results: Results, landscapes: Landscapes | None = None,
                gates: Sequence[Gate] = (), gate_results: Results | None = None) -> ClaimJudgement:
    """``claim`` judged on ``results``: its primary cell, or every cell where both arms ran (an :data:`ANY` arm runs
    in every cell), each checked first against ``gates`` (the reproduction's) and the claim's own. The gates read
    ``gate_results`` where given (validation scores: a gate decided on the test outcomes it guards would let them
    choose whether a verdict is published; issue 45), else ``results``."""
    for arm in (claim.better, claim.worse):
        if arm not in results:
            raise ValueError(f"claim {claim.text!r} names the arm {arm!r}, which has no results; the arms are "
                             f"{sorted(results)}")
    better_cells, worse_cells = results[claim.better], results[claim.worse]
    if claim.primary is not None:
        cells = [claim.primary]
    else:
        candidates = [cell for cell in (*better_cells, *worse_cells) if cell != ANY] or [ANY]
        cells = [cell for cell in dict.fromkeys(candidates)
                 if (cell in better_cells or ANY in better_cells) and (cell in worse_cells or ANY in worse_cells)]
    differences = []
    for cell in cells:
        better, worse = (results[arm].get(cell, results[arm].get(ANY)) for arm in (claim.better, claim.worse))
        if better is None or worse is None:
            raise ValueError(f"claim {claim.text!r}: its primary cell {cell!r} is not a cell of both arms")
        difference = (paired_difference(cell, better, worse, higher_is_better=claim.higher_is_better)
                      if claim.paired else
                      welch_difference(cell, list(better.values()), list(worse.values()),
                                       higher_is_better=claim.higher_is_better))
        read = results if gate_results is None else gate_results
        failed = [why for gate in (*gates, *claim.gates) if (why := gate.check(read, cell, landscapes or {}))]
        if failed:
            difference = replace(difference, withheld="; ".join(failed))
        differences.append(difference)
    return ClaimJudgement(tuple(differences), claim.paper_effect, claim.every, claim.effect_transfers)
