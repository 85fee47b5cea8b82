"""Running a federated reproduction end to end: its sweep (full, or ``--quick`` on tiny data), its claims judged by
the one rule of :mod:`fedpub.simulations.reproductions.judge`, ``comparison.md`` and ``claims.json``.

A reproduction module declares a :class:`FederatedReproduction` (its sweep YAML, the paper's claims and the
paper's own figure for each) and its ``main(argv)`` calls :func:`run`. ``--out DIR`` puts the sweep's folder at
DIR (the sweep actually run is written there as ``sweep.yaml``); ``--quick`` runs the same strategies on a tiny
synthetic population for two rounds at the sweep's largest ε with 3 seeds (tens of seconds: for the tests; its
verdicts say nothing about the paper).
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from fedpub.atomic import write_text_atomic
from fedpub.config import apply_overrides
from fedpub.simulations.compare import load_sweep, run_sweep
from fedpub.simulations.compare_report import CSV_FILE, EPSILON_PLOT, ROUND_PLOT, TABLE_FILE, read_csv
from fedpub.simulations.reproductions.claims import Claim, judge_claims
from fedpub.simulations.reproductions.judge import RULE
from fedpub.simulations.reproductions.results_record import ClaimRecord, ReproductionRecord, write_claims_json

QUICK_OVERRIDES = (
    "rounds=2", "eval_every=1", "checkpoint_every=1",
    "data.synthetic.num_writers=40", "data.synthetic.min_examples=8", "data.synthetic.max_examples=16",
    "data.public.fraction=0.25", "data.eval_clients=10", "client.epochs=1",
    "strategy.sampling.clients_per_round=6",
)
"""A tiny population (30 private, 10 public writers), two rounds: the pipeline, not the paper."""


@dataclass(frozen=True)
class FederatedReproduction:
    """A paper's claims checked on a sweep of fedpub runs."""

    name: str
    seed_paper: str
    title: str
    paper: str
    sweep: Path
    claims: tuple[Claim, ...]
    paper_figures: tuple[str, ...]
    """The paper's own number or words for each claim, in the claims' order."""
    tuning: str
    """How the settings were chosen (and what tuning cost), for the results page."""
    note: str = ""


def _sweep_file(repro: FederatedReproduction, out: Path, quick: bool) -> Path:
    """The sweep as run: its base resolved, its folder ``out``; in quick mode at its largest ε only, every strategy
    with :data:`QUICK_OVERRIDES` (over its own settings)."""
    raw = yaml.safe_load(repro.sweep.read_text(encoding="utf-8"))
    raw["base"] = str((repro.sweep.parent / raw["base"]).resolve())
    raw["name"], raw["output_dir"] = out.name, str(out.parent)
    if quick:
        raw["epsilons"], raw["seeds"] = [max(raw["epsilons"])], [0, 1, 2]
        quick_settings = (*QUICK_OVERRIDES, f"data.path={out / 'data'}")
        raw["strategies"] = {label: apply_overrides(copy.deepcopy(settings or {}), quick_settings)
                             for label, settings in raw["strategies"].items()}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep.yaml"
    write_text_atomic(path, yaml.safe_dump(raw, sort_keys=False))
    return path


def run(repro: FederatedReproduction, argv: Sequence[str] | None = None) -> Path:
    """Run (or resume) the reproduction's sweep, judge its claims, write comparison.md and claims.json."""
    parser = argparse.ArgumentParser(description=repro.title)
    parser.add_argument("--out", type=Path, default=Path("runs/reproductions") / repro.name)
    parser.add_argument("--quick", action="store_true", help="tiny population, 2 rounds, largest ε, 3 seeds")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    sweep = load_sweep(_sweep_file(repro, args.out, args.quick))
    result = run_sweep(sweep)
    if result.failures:
        raise RuntimeError(f"{len(result.failures)} runs failed; see above (rerun to resume)")
    rows = read_csv(sweep.root / CSV_FILE)
    judged = judge_claims(rows, sweep.headline, repro.claims)
    sentences = [j.sentence(c.text, c.better, c.worse) for c, j in zip(repro.claims, judged)]
    lines = [f"# {repro.title}", "", repro.paper, "", "## Claims checked", "", RULE, "", *sentences, ""]
    if repro.note:
        lines += [repro.note, ""]
    lines += [repro.tuning, "", "The table is `compare.md`, the plots `accuracy_vs_epsilon.png` and "
              "`accuracy_vs_round.png`; the sweep run is `sweep.yaml`.", ""]
    write_text_atomic(sweep.root / "comparison.md", "\n".join(lines))
    print("\n".join(lines))
    command = f"python -m fedpub.simulations.reproductions.{repro.name}" + (" --quick" if args.quick else "")
    write_claims_json(sweep.root, ReproductionRecord(
        repro.name, repro.seed_paper, repro.title, repro.paper, command, args.quick, len({r.seed for r in sweep.runs}),
        time.perf_counter() - start, repro.tuning,
        tuple(ClaimRecord.of(c.text, c.better, c.worse, j, figure)
              for c, j, figure in zip(repro.claims, judged, repro.paper_figures, strict=True)),
        tuple(p for p in ("comparison.md", TABLE_FILE) if (sweep.root / p).exists()),
        tuple(p for p in (EPSILON_PLOT, ROUND_PLOT) if (sweep.root / p).exists()),
    ))
    return sweep.root / "comparison.md"
