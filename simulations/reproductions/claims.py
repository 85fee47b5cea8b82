"""Checking a paper's claims against a comparison's rows, for the federated reproductions.

A claim says that one strategy's headline test metric beats another's. :func:`verdicts` judges it at every ε
where both ran, from the seeds' figures, by the one rule of :mod:`fedpub.simulations.reproductions.judge` (a
win only when the difference exceeds its uncertainty). Nothing is decided in advance: the sentence comes from the
rows. :func:`reproduce` runs a reproduction's sweep into ``runs/reproductions/<name>/`` and writes its
``comparison.md`` and its ``claims.json`` for the results page.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedpub.atomic import write_text_atomic
from fedpub.simulations.compare import deep_merge, load_sweep, run_sweep
from fedpub.simulations.compare_report import (
    CSV_FILE,
    EPSILON_PLOT,
    ROUND_PLOT,
    TABLE_FILE,
    group_epsilon,
    read_csv,
)
from fedpub.simulations.reproductions.judge import RULE, ClaimJudgement, judge_cell
from fedpub.simulations.reproductions.results_record import ClaimRecord, ReproductionRecord, write_claims_json

REPRODUCTIONS = Path("runs/reproductions")
"""Where every reproduction writes its outputs, one folder each."""


@dataclass(frozen=True)
class Claim:
    """``better`` beats ``worse`` on the reproduction's test metric (the paper's words in ``text``): the headline
    metric of a sweep (:func:`verdicts`), or every (loss, ε) of the PPSGD synthetic study
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


def verdicts(rows: Sequence[Mapping[str, Any]], headline: str, claims: Sequence[Claim]) -> list[str]:
    """One markdown bullet per claim: its verdict over every ε where both strategies ran, with each ε's figures."""
    return [j.sentence(c.text, c.better, c.worse) for c, j in zip(claims, judge_claims(rows, headline, claims))]


def claim_records(
    rows: Sequence[Mapping[str, Any]], headline: str, claims: Sequence[Claim], paper: str
) -> tuple[ClaimRecord, ...]:
    """The claims judged, as ``claims.json`` records (a claim without its own paper figure shows ``paper``)."""
    return tuple(ClaimRecord.of(c.text, c.better, c.worse, j, c.paper_figure or paper)
                 for c, j in zip(claims, judge_claims(rows, headline, claims)))


def seed_paper_of(title: str) -> str:
    """The seed paper ("000".."004") a title names as ``Seed 00X``; refuses a title without one."""
    match = re.search(r"\bSeed (\d{3})\b", title)
    if match is None:
        raise ValueError(f"title {title!r} names no seed paper: start it with 'Seed 000' .. 'Seed 004' or pass "
                         "seed_paper")
    return match[1]


NOT_TUNED = ("Not tuned: every method runs with the sweep's hyper-parameters. Hyper-parameter choices are not "
             "counted in ε.")


def reproduce(
    sweep_path: Path,
    title: str,
    paper: str,
    claims: Sequence[Claim],
    note: str = "",
    *,
    seed_paper: str | None = None,
    command: str | None = None,
    quick: bool = False,
    tuning: str = NOT_TUNED,
    out: Path | None = None,
) -> Path:
    """Run (or resume) the sweep, then write ``comparison.md`` and ``claims.json`` next to its table and plots.
    ``out`` (default ``runs/reproductions/<sweep file's stem>``) replaces the sweep's output folder; ``seed_paper``
    defaults to the one ``title`` names; ``tuning`` is the paragraph saying how the sweep's values were chosen."""
    started = time.perf_counter()
    out = Path(out) if out is not None else REPRODUCTIONS / Path(sweep_path).stem
    sweep = load_sweep(placed_sweep(Path(sweep_path), out))
    result = run_sweep(sweep)
    if result.failures:
        raise RuntimeError(f"{len(result.failures)} runs failed; see above (rerun to resume)")
    rows = read_csv(sweep.root / CSV_FILE)
    lines = [f"# {title}", "", paper, "", "## Claims checked", "", RULE, "", *verdicts(rows, sweep.headline, claims),
             ""]
    if note:
        lines += [note, ""]
    lines += ["The table is `compare.md`, the plots `accuracy_vs_epsilon.png` and `accuracy_vs_round.png`.", "",
              f"Tuning: {tuning}", ""]
    path = sweep.root / "comparison.md"
    write_text_atomic(path, "\n".join(lines))
    print("\n".join(lines))
    seeds = len({r["seed"] for r in rows})
    write_claims_json(sweep.root, ReproductionRecord(
        name=sweep.root.name, seed_paper=seed_paper or seed_paper_of(title), title=title, paper=paper,
        command=command or f"fedpub compare {sweep_path}", quick=quick, seeds=seeds,
        wall_time_s=time.perf_counter() - started, tuning=tuning,
        claims=claim_records(rows, sweep.headline, claims, paper),
        tables=("comparison.md", TABLE_FILE), figures=(EPSILON_PLOT, ROUND_PLOT),
    ))
    return path


def placed_sweep(sweep_path: Path, out: Path, base_changes: Mapping[str, Any] | None = None,
                 sweep_changes: Mapping[str, Any] | None = None) -> Path:
    """The sweep of ``sweep_path`` written as ``out/sweep.yaml`` (the record of what ran) with its output in
    ``out``: its base inlined with ``base_changes`` merged in, its own fields with ``sweep_changes``."""
    raw = yaml.safe_load(sweep_path.read_text())
    base = raw["base"] if isinstance(raw["base"], dict) else yaml.safe_load((sweep_path.parent / raw["base"]).read_text())
    placed = {**raw, **(sweep_changes or {}), "base": deep_merge(base, dict(base_changes or {})),
              "name": out.name, "output_dir": str(out.parent)}
    path = out / "sweep.yaml"
    write_text_atomic(path, yaml.safe_dump(placed, sort_keys=False))
    return path
