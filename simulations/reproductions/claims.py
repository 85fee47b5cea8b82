"""Checking a paper's claims against a comparison's rows, for the federated reproductions.

A claim says that one strategy's headline test metric beats another's. :func:`verdicts` compares
the mean over seeds at every ε where both ran and says, per claim, ``reproduced`` (better at every
ε), ``partly`` (at some) or ``not reproduced`` (at none), with the numbers and whether each gap is
larger than the seeds' spread. Nothing is decided in advance: the sentence comes from the rows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpub.atomic import write_text_atomic
from fedpub.simulations.compare import load_sweep, run_sweep
from fedpub.simulations.compare_report import CSV_FILE, group_epsilon, read_csv


@dataclass(frozen=True)
class Claim:
    """``better`` beats ``worse`` on the reproduction's test metric (the paper's words in ``text``): the headline
    metric of a sweep (:func:`verdicts`), or every (loss, ε) of the PPSGD synthetic study
    (:func:`fedpub.simulations.reproductions.ppsgd_synthetic.verdict`)."""

    text: str
    better: str
    worse: str


def _mean_and_spread(rows: Sequence[Mapping[str, Any]], key: str) -> tuple[float, float]:
    values = [float(r[key]) for r in rows]
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def verdicts(rows: Sequence[Mapping[str, Any]], headline: str, claims: Sequence[Claim]) -> list[str]:
    """One markdown bullet per claim: its verdict and the per-ε means (± std over seeds)."""
    key = f"eval_{headline}"
    by_cell: dict[tuple[str, float], list[Mapping[str, Any]]] = {}
    for row in rows:
        by_cell.setdefault((row["strategy"], group_epsilon(row)), []).append(row)
    lines = []
    for claim in claims:
        epsilons = sorted({e for s, e in by_cell if s == claim.better} & {e for s, e in by_cell if s == claim.worse})
        if not epsilons:
            lines.append(f"- {claim.text}: **not checked** (no ε where both `{claim.better}` and `{claim.worse}` ran)")
            continue
        wins, details = 0, []
        for eps in epsilons:
            (b, b_sd), (w, w_sd) = (_mean_and_spread(by_cell[(s, eps)], key) for s in (claim.better, claim.worse))
            wins += b > w
            clear = abs(b - w) > math.hypot(b_sd, w_sd)
            details.append(f"ε={eps:g}: {b:.4f}±{b_sd:.4f} vs {w:.4f}±{w_sd:.4f}"
                           + ("" if clear else " (within the seeds' spread)"))
        verdict = "reproduced" if wins == len(epsilons) else "partly reproduced" if wins else "not reproduced"
        lines.append(f"- {claim.text}: **{verdict}** — `{claim.better}` vs `{claim.worse}` "
                     f"{headline}, better at {wins} of {len(epsilons)} ε; " + "; ".join(details))
    return lines


def reproduce(sweep_path: Path, title: str, paper: str, claims: Sequence[Claim], note: str = "") -> Path:
    """Run (or resume) the sweep, then write ``comparison.md`` next to its table and plots."""
    sweep = load_sweep(sweep_path)
    result = run_sweep(sweep)
    if result.failures:
        raise RuntimeError(f"{len(result.failures)} runs failed; see above (rerun to resume)")
    rows = read_csv(sweep.root / CSV_FILE)
    lines = [f"# {title}", "", paper, "", "## Claims checked", "", *verdicts(rows, sweep.headline, claims), ""]
    if note:
        lines += [note, ""]
    lines += ["The table is `compare.md`, the plots `accuracy_vs_epsilon.png` and `accuracy_vs_round.png`. "
              "Hyper-parameter tuning is not counted in ε.", ""]
    path = sweep.root / "comparison.md"
    write_text_atomic(path, "\n".join(lines))
    print("\n".join(lines))
    return path
