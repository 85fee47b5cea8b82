"""Checking a paper's claims against a comparison's rows, for the federated reproductions.

A claim says that one strategy's headline test metric beats another's. :func:`verdicts` judges it at every ε
where both ran, from the seeds' figures, by the one rule of :mod:`fedpub.simulations.reproductions.judge` (a
win only when the difference exceeds its uncertainty). Nothing is decided in advance: the sentence comes from the
rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpub.atomic import write_text_atomic
from fedpub.simulations.compare import load_sweep, run_sweep
from fedpub.simulations.compare_report import CSV_FILE, group_epsilon, read_csv
from fedpub.simulations.reproductions.judge import RULE, ClaimJudgement, judge_cell


@dataclass(frozen=True)
class Claim:
    """``better`` beats ``worse`` on the reproduction's test metric (the paper's words in ``text``): the headline
    metric of a sweep (:func:`verdicts`), or every (loss, ε) of the PPSGD synthetic study
    (:func:`fedpub.simulations.reproductions.ppsgd_synthetic.verdict`)."""

    text: str
    better: str
    worse: str


def judgements(rows: Sequence[Mapping[str, Any]], headline: str, claims: Sequence[Claim]) -> list[ClaimJudgement]:
    """Each claim judged at every ε where both strategies ran, from the seeds' figures of ``eval_<headline>``."""
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


def verdicts(rows: Sequence[Mapping[str, Any]], headline: str, claims: Sequence[Claim]) -> list[str]:
    """One markdown bullet per claim: its verdict over every ε where both strategies ran, with each ε's figures."""
    return [judged.sentence(claim.text, claim.better, claim.worse)
            for claim, judged in zip(claims, judgements(rows, headline, claims))]


def reproduce(sweep_path: Path, title: str, paper: str, claims: Sequence[Claim], note: str = "") -> Path:
    """Run (or resume) the sweep, then write ``comparison.md`` next to its table and plots."""
    sweep = load_sweep(sweep_path)
    result = run_sweep(sweep)
    if result.failures:
        raise RuntimeError(f"{len(result.failures)} runs failed; see above (rerun to resume)")
    rows = read_csv(sweep.root / CSV_FILE)
    lines = [f"# {title}", "", paper, "", "## Claims checked", "", RULE, "", *verdicts(rows, sweep.headline, claims),
             ""]
    if note:
        lines += [note, ""]
    lines += ["The table is `compare.md`, the plots `accuracy_vs_epsilon.png` and `accuracy_vs_round.png`. "
              "Hyper-parameter tuning is not counted in ε.", ""]
    path = sweep.root / "comparison.md"
    write_text_atomic(path, "\n".join(lines))
    print("\n".join(lines))
    return path
