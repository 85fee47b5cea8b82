"""One rule for judging a reproduction's claims: a win only when the difference exceeds its uncertainty.

Every reproduction states a paper's claim as "method A beats method B" over a grid of cells (ε, loss, data size)
and judges it here, from the figures of its seeds:

- a method's figure in a cell is the **mean over its seeds ± its standard error** s/√n;
- a cell is a **win** for A when A's mean is better than B's by more than t·SE, where SE = √(se_A² + se_B²) is the
  standard error of the difference and t the one-sided 97.5 % quantile of Student's t with the Welch–Satterthwaite
  degrees of freedom (a two-sided 95 % test: with 3 seeds a side t ≈ 2.8–4.3); a **loss** when worse by as much; a
  **tie** otherwise: the seeds cannot tell the two apart;
- the claim over its whole grid is **reproduced** when every cell is a win, **partly reproduced** when some are and
  none is a loss, **not reproduced** when every cell is a tie, **refuted** when some cells are losses and none a
  win, **mixed** when there are both;
- a cell with fewer than :data:`MIN_SEEDS` seeds on either side is **not judged**, and so is the claim.

Nothing is decided in advance: the verdict and its sentence come from the figures.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from scipy import stats

MIN_SEEDS = 3
"""Fewer seeds give no usable standard error: such a cell, and its claim, are not judged."""
CONFIDENCE = 0.975
"""The one-sided quantile of the test: a two-sided 95 % test of "the means differ"."""
RULE = (
    f"Each figure is the mean over seeds ± its standard error (s/√n). A cell is a win when the claimed-better "
    f"method's mean is better by more than t·√(se₁² + se₂²), t being Student's {CONFIDENCE:.1%} quantile with "
    f"Welch's degrees of freedom (a two-sided 95 % test), a loss when worse by as much, else a tie. A claim is "
    f"reproduced when every cell of its grid is a win, partly reproduced when some are and none is lost, not "
    f"reproduced when all tie, refuted when cells are lost and none won, mixed when some are won and some lost; "
    f"a cell with fewer than {MIN_SEEDS} seeds is not judged."
)
"""The rule in one paragraph, for a reproduction's ``comparison.md``."""

Outcome = Literal["win", "tie", "loss", "not judged"]


@dataclass(frozen=True)
class Estimate:
    """A method's figure in one cell: the mean over ``n`` seeds and its standard error."""

    mean: float
    se: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Estimate:
        """The estimate from the seeds' figures."""
        values = [float(v) for v in values]
        sd = statistics.stdev(values) if len(values) > 1 else math.nan
        return cls(statistics.fmean(values), sd / math.sqrt(len(values)), len(values))

    @classmethod
    def from_summary(cls, mean: float, sd: float, n: int) -> Estimate:
        """The estimate from a mean, the seeds' standard deviation and their number."""
        return cls(mean, sd / math.sqrt(n) if n > 1 else math.nan, n)

    def __str__(self) -> str:
        return f"{self.mean:.4f} ± {self.se:.4f} (n={self.n})"


@dataclass(frozen=True)
class CellJudgement:
    """One cell of a claim's grid: both estimates, the margin the difference had to exceed, and the outcome."""

    cell: str
    better: Estimate
    worse: Estimate
    margin: float
    outcome: Outcome

    def __str__(self) -> str:
        said = {"win": "win", "tie": "tie", "loss": "LOSS", "not judged": f"not judged: under {MIN_SEEDS} seeds"}
        return f"{self.cell}: {self.better} vs {self.worse}, margin {self.margin:.4f} ({said[self.outcome]})"


def welch_margin(a: Estimate, b: Estimate) -> float:
    """t·SE of the difference of two estimates (Welch); 0 when neither varies over its seeds."""
    se = math.hypot(a.se, b.se)
    if se == 0:
        return 0.0
    dof = se**4 / sum(e.se**4 / (e.n - 1) for e in (a, b) if e.se > 0)
    return float(stats.t.ppf(CONFIDENCE, dof)) * se


def judge_cell(
    cell: str, better: Sequence[float], worse: Sequence[float], *, higher_is_better: bool = True
) -> CellJudgement:
    """Whether the seeds' figures ``better`` beat ``worse`` in ``cell`` by more than their uncertainty."""
    return judge_estimates(cell, Estimate.of(better), Estimate.of(worse), higher_is_better=higher_is_better)


def judge_estimates(cell: str, better: Estimate, worse: Estimate, *, higher_is_better: bool = True) -> CellJudgement:
    """:func:`judge_cell` from estimates already summarised."""
    if min(better.n, worse.n) < MIN_SEEDS:
        return CellJudgement(cell, better, worse, math.nan, "not judged")
    margin = welch_margin(better, worse)
    gap = (better.mean - worse.mean) * (1 if higher_is_better else -1)
    outcome: Outcome = "win" if gap > margin else "loss" if gap < -margin else "tie"
    return CellJudgement(cell, better, worse, margin, outcome)


@dataclass(frozen=True)
class ClaimJudgement:
    """A claim judged over its whole grid."""

    cells: tuple[CellJudgement, ...]

    def count(self, outcome: Outcome) -> int:
        return sum(c.outcome == outcome for c in self.cells)

    @property
    def verdict(self) -> str:
        wins, losses = self.count("win"), self.count("loss")
        if not self.cells:
            return "not checked"
        if self.count("not judged"):
            return "not judged"
        if losses:
            return "mixed" if wins else "refuted"
        return "reproduced" if wins == len(self.cells) else "partly reproduced" if wins else "not reproduced"

    def sentence(self, text: str, better: str, worse: str) -> str:
        """A markdown bullet: the claim, its verdict, the tally and every cell's figures."""
        if not self.cells:
            return f"- {text}: **not checked** (no cell where both `{better}` and `{worse}` ran)"
        tally = (f"`{better}` vs `{worse}`: {self.count('win')} wins, {self.count('tie')} ties, "
                 f"{self.count('loss')} losses of {len(self.cells)} cells")
        if self.count("not judged"):
            tally += f", {self.count('not judged')} not judged (under {MIN_SEEDS} seeds)"
        return f"- {text}: **{self.verdict}** — {tally}; " + "; ".join(str(c) for c in self.cells)

