"""A sweep's rows as the judge's plain structure, and the paper's claims judged on them.

:func:`results_of` turns the rows of a federated reproduction (one per strategy, ε and seed; a control's rows have
no ε) into :data:`~fedpub.simulations.reproductions.judge.Results`: ``{strategy: {"ε=<ε>": {seed: metric}}}``, a
control in the :data:`~fedpub.simulations.reproductions.judge.ANY` cell (run once, counted once).
:func:`judge_claims` judges each claim by :func:`~fedpub.simulations.reproductions.judge.judge_claim`, the
reproduction's gates checked first. The federated reproductions are run by
:mod:`fedpub.simulations.reproductions.federated`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from fedpub.simulations.reproductions.judge import (
    ANY,
    Claim,
    ClaimJudgement,
    Gate,
    Landscapes,
    Results,
    judge_claim,
)


def cell_of(epsilon: float | None) -> str:
    """The cell of a run at target ``epsilon`` (None: a control that does not depend on ε)."""
    return ANY if epsilon is None else f"ε={epsilon:g}"


def results_of(rows: Sequence[Mapping[str, Any]], headline: str,
               split: Literal["eval", "val"] = "eval") -> dict[str, dict[str, dict[int, float]]]:
    """``{strategy: {cell: {seed: <split>_<headline>}}}`` (``eval``: the test users; ``val``: the validation users,
    what the gates read); a seed twice in one cell, or a row without the metric, is refused."""
    results: dict[str, dict[str, dict[int, float]]] = {}
    for row in rows:
        cell = cell_of(row.get("target_epsilon"))
        seeds = results.setdefault(row["strategy"], {}).setdefault(cell, {})
        if row["seed"] in seeds:
            raise ValueError(f"{row['strategy']} seed {row['seed']} appears twice in {cell}")
        metric = f"{split}_{headline}"
        if metric not in row:
            raise ValueError(f"{row['strategy']} seed {row['seed']} has no {metric}; its metrics are "
                             f"{sorted(k for k in row if k.startswith(('eval_', 'val_')))}")
        seeds[row["seed"]] = float(row[metric])
    return results


def judge_claims(results: Results, claims: Sequence[Claim], gates: Sequence[Gate] = (),
                 landscapes: Landscapes | None = None, gate_results: Results | None = None) -> list[ClaimJudgement]:
    """Each claim judged on ``results``, ``gates`` checked in every cell first (on ``gate_results`` where given)."""
    return [judge_claim(claim, results, landscapes, gates, gate_results) for claim in claims]
