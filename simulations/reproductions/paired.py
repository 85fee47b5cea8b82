"""Per-seed figures of a synthetic reproduction's arms and its claims, for a paired judge: ``paired.json``.

The synthetic reproductions (fedpub issue 36, item 4) run every arm on the same seeds with common random numbers
(one seed: one data draw, one stream of batches and noise, shared by the arms), so a claim is judged on the
**paired** differences, seed by seed. This module keeps what such a judge needs and nothing it must guess:

    {"name", "metric", "higher_is_better", "seeds": [...],
     "values": {arm: {cell: {seed: value}}}, "measures": {measure: {cell: {seed: value}}},
     "claims": [{"text", "better", "worse", "cells", "paper_effect", "paper_figure", "role", "gates"}]}

``paper_effect`` is the paper's own effect in this metric's units (better − worse, signed so that positive favours
``better``), or null where the paper's metric is not this one (its words are in ``paper_figure``). ``role`` is
``"claim"`` (the paper's), ``"control"`` (a negative control where the paper's mechanism should not act: its
direction is the one the mechanism predicts there) or ``"gate"`` (a regime check: the claim is testable only if it
holds). ``gates`` are the judge's regime gates checked in each cell before the claim is judged there; the
``measures`` they read (regime figures that are not a method's metric, e.g. the share of chains that miss the right
basin) are kept beside the values. :func:`judgement` judges a claim with the paired t of
:mod:`fedpub.simulations.reproductions.judge`, and :func:`paired_line` prints the paired differences.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from fedpub.atomic import write_json_atomic
from fedpub.simulations.reproductions.judge import Claim, ClaimJudgement, Gate, judge_claim

PAIRED_FILE = "paired.json"
Values = Mapping[str, Mapping[str, Mapping[int, float]]]
"""arm → cell → seed → the seed's metric."""


@dataclass(frozen=True)
class PairedClaim:
    """``better`` beats ``worse`` in every one of ``cells``, seed by seed."""

    text: str
    better: str
    worse: str
    cells: tuple[str, ...]
    paper_effect: float | None = None
    paper_figure: str = ""
    role: Literal["claim", "control", "gate"] = "claim"
    every: bool = False
    gates: tuple[Gate, ...] = ()



def differences(values: Values, claim: PairedClaim, cell: str, higher_is_better: bool) -> list[float]:
    """better − worse per seed both ran (signed so that positive favours ``better``), in seed order."""
    better, worse = values[claim.better][cell], values[claim.worse][cell]
    sign = 1.0 if higher_is_better else -1.0
    return [sign * (better[s] - worse[s]) for s in sorted(better.keys() & worse.keys())]


def paired_line(values: Values, claim: PairedClaim, higher_is_better: bool) -> str:
    """One markdown bullet: per cell the mean ± sd of the paired differences, the seeds, and how many favour
    ``better``."""
    parts = []
    for cell in claim.cells:
        diff = differences(values, claim, cell, higher_is_better)
        sd = statistics.stdev(diff) if len(diff) > 1 else math.nan
        parts.append(f"{cell}: {statistics.fmean(diff):+.4g} ± {sd:.3g} ({sum(d > 0 for d in diff)}/{len(diff)} "
                     "seeds favour it)")
    return (f"- [{claim.role}] {claim.text} — `{claim.better}` − `{claim.worse}`, paired per seed (positive "
            "favours the first), mean ± sd: " + "; ".join(parts))


def judgement(values: Values, claim: PairedClaim, higher_is_better: bool,
              measures: Values | None = None) -> ClaimJudgement:
    """The claim judged over its cells by the judge's paired t on the seeds both arms ran (Holm over the cells),
    each cell first checked against the claim's gates, which read ``measures`` and every arm's values there."""
    cells = {arm: {cell: per[cell] for cell in claim.cells if cell in per} for arm, per in values.items()}
    return judge_claim(Claim(claim.text, claim.better, claim.worse, claim.paper_figure, claim.paper_effect,
                             higher_is_better, paired=True, every=claim.every), {**(measures or {}), **cells},
                       gates=claim.gates)


def _per_seed(values: Values) -> dict[str, dict[str, dict[str, float]]]:
    return {arm: {cell: {str(s): float(v) for s, v in sorted(per.items())} for cell, per in cells.items()}
            for arm, cells in values.items()}


def write_paired_json(out: Path, name: str, metric: str, higher_is_better: bool, values: Values,
                      claims: Sequence[PairedClaim], measures: Values | None = None) -> Path:
    """Write ``out/paired.json`` (a gate written as its repr); refuses a claim that names an arm or cell with no
    values."""
    for claim in claims:
        for arm in (claim.better, claim.worse):
            missing = [c for c in claim.cells if not values.get(arm, {}).get(c)]
            if missing:
                raise ValueError(f"claim {claim.text!r}: arm {arm!r} has no values in cells {missing}; arms with "
                                 f"values: {sorted(values)}")
    seeds = sorted({s for cells in values.values() for per in cells.values() for s in per})
    path = Path(out) / PAIRED_FILE
    write_json_atomic(path, {
        "name": name, "metric": metric, "higher_is_better": higher_is_better, "seeds": seeds,
        "values": _per_seed(values), "measures": _per_seed(measures or {}),
        "claims": [{**asdict(c), "cells": list(c.cells), "gates": [repr(g) for g in c.gates]} for c in claims],
    })
    return path
