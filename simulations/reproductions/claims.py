"""A paper's claim, and its judgement against a comparison's rows, for the reproductions.

A claim says that one strategy's headline test metric beats another's. :func:`judge_claims` judges it at every ε
where both ran, from the seeds' figures, by the one rule of :mod:`fedpub.simulations.reproductions.judge` (a
win only when the difference exceeds its uncertainty). Nothing is decided in advance: the verdict comes from the
rows. The federated reproductions are run by :mod:`fedpub.simulations.reproductions.federated`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fedpub.simulations.tools.compare_report import group_epsilon
from fedpub.simulations.reproductions.judge import ClaimJudgement, judge_cell


@dataclass(frozen=True)
class Claim:
    """``better`` beats ``worse`` on the reproduction's test metric (the paper's words in ``text``): the headline
    metric of a sweep (:func:`judge_claims`), or every (loss, ε) of the PPSGD synthetic study
    (:func:`fedpub.simulations.reproductions.ppsgd_synthetic.verdict`). ``paper_figure``: the paper's own number
    for it, shown beside ours on the results page."""

    text: str
    better: str
    worse: str
    paper_figure: str = ""


def judge_claims(rows: Sequence[Mapping[str, Any]], headline: str, claims: Sequence[Claim]) -> list[ClaimJudgement]:
    """Each claim judged over every ε where both strategies ran, from the seeds' figures."""
    key = f"eval_{headline}"
    by_cell: dict[tuple[str, float], list[float]] = {}
    for row in rows:
        by_cell.setdefault((row["strategy"], group_epsilon(row)), []).append(float(row[key]))
    judged = []
    for claim in claims:
        epsilons = sorted({e for s, e in by_cell if s == claim.better} & {e for s, e in by_cell if s == claim.worse})
        judged.append(ClaimJudgement(tuple(
            judge_cell(f"ε={eps:g}", by_cell[(claim.better, eps)], by_cell[(claim.worse, eps)]) for eps in epsilons
        )))
    return judged
