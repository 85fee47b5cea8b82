"""A run's plot (the task's headline metric and ε by round) and its short markdown summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fedpub import recipe_registry  # noqa: E402
from fedpub.atomic import atomic_path, write_text_atomic  # noqa: E402

if TYPE_CHECKING:
    from fedpub.simulations.run.experiment import Experiment


def write_plot(
    records: Sequence[Mapping[str, Any]], path: Path, metric: str = "accuracy", evaluated_on: str | None = None
) -> None:
    """The test ``metric`` (left axis) and ε spent (right axis) against the round (counted from 1);
    ``evaluated_on`` (whose test examples) is the plot's title."""
    key = f"eval_{metric}"
    evaluated = [r for r in records if key in r]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot([r["round"] + 1 for r in evaluated], [r[key] for r in evaluated], "o-", color="C0")
    ax.set_xlabel("rounds completed (metrics.jsonl's round + 1)")
    ax.set_ylabel(f"test {metric}", color="C0")
    ax.grid(alpha=0.3)
    if evaluated_on is not None:
        ax.set_title(f"evaluated on {evaluated_on}", fontsize=9)
    eps = [(r["round"] + 1, float(r["epsilon"])) for r in records if "epsilon" in r]  # inf is stored as "inf"
    if eps and all(e < float("inf") for _, e in eps):
        twin = ax.twinx()
        twin.plot([t for t, _ in eps], [e for _, e in eps], "-", color="C3")
        twin.set_ylabel("ε spent", color="C3")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


NEIGHBOURS = {
    "ADD_OR_REMOVE_ONE": "add/remove-one",
    "REPLACE_ONE": "replace-one",
    "REPLACE_SPECIAL": "replace-special (a user replaced by one who contributes nothing)",
}
"""The neighbouring relations of fedpub's cohort rules, in words."""


def write_summary(
    path: Path,
    experiment: Experiment,
    records: Sequence[Mapping[str, Any]],
    final_eval: Mapping[str, float],
    epsilon: float,
    stopped_by_budget: bool,
) -> None:
    """The released figures only: no diagnostic (the rounds' wall time, norms, cohorts) stands beside them."""
    cfg = experiment.config
    strategy = experiment.strategy
    metric = experiment.task.headline
    parts = [name for name in recipe_registry.PUBLIC_PARTS if getattr(cfg.strategy, name) is not None]
    moving_clip = cfg.strategy.adaptive_clip is not None or cfg.strategy.public_schedule is not None
    lines = [
        f"# Run `{cfg.name}`",
        "",
        "| | |",
        "|---|---|",
        f"| strategy | {strategy.name} |",
        f"| rounds completed | {len(records)} of {cfg.rounds}"
        + (" (stopped: the next round would exceed the privacy budget)" if stopped_by_budget else "")
        + " |",
        f"| final test {metric} | {final_eval[f'eval_{metric}']:.4f} |",
        f"| final test loss | {final_eval['eval_loss']:.4f} |",
        f"| evaluated on | {experiment.eval_users.label} |",
        f"| user-level (ε, δ) | ({epsilon:.4g}, {cfg.privacy.delta:g}), {cfg.privacy.accountant.upper()} accountant |",
        f"| private users N | {strategy.population} ({held_out_users(experiment)}) |",
        f"| sampling | {type(strategy.sampling).__name__}, expected cohort m = {strategy.expected_cohort:g}, "
        f"q = {strategy.expected_cohort / strategy.population:.4g} |",
        f"| noise multiplier z | {experiment.noise_multiplier:.4g}"
        + (" (calibrated to strategy.target_epsilon)" if cfg.strategy.target_epsilon is not None else "") + " |",
        f"| device | {experiment.device} |",
        f"| clip norm C | {cfg.strategy.clip_norm:g}" + (" (initial; it moves)" if moving_clip else "") + " |",
        f"| public-data parts | {', '.join(parts) or 'none'} |",
        "",
        *(
            [f"The released model is fine-tuned on public data (model reuse); the last private model scored "
             f"{final_eval[f'private_eval_{metric}']:.4f}.", ""]
            if f"private_eval_{metric}" in final_eval else []
        ),
        *(
            [f"The average of the last models ({cfg.strategy.model_average.kind}) scored "
             f"{final_eval[f'avg_eval_{metric}']:.4f}.", ""]
            if f"avg_eval_{metric}" in final_eval else []
        ),
        f"ε is for one user (all of a user's data) under {NEIGHBOURS[strategy.sampling.neighboring_relation.name]}"
        " neighbours (the cohort rule's). Hyper-parameter tuning is not counted in ε.",
        "The ledger (`ledger.json`) holds the composed DpEvent so anyone can recompute ε.",
        "",
        f"Randomness: {experiment.randomness.statement()}.",
        "",
        "Released: the model, ε and `metrics.jsonl` (noised or public statistics and the evaluation). "
        + ("`diagnostics.jsonl` holds un-noised statistics of the private users (realised cohort, failures, norms, "
           "training loss, wall time): it is outside the DP guarantee, for the server's eyes only."
           if experiment.diagnostics else "No diagnostics were written."),
        "",
    ]
    write_text_atomic(path, "\n".join(lines))


def held_out_users(experiment: Experiment) -> str:
    """The users kept out of N, in words: the public users, and the validation and evaluation users held out."""
    counts = {"public users": experiment.public_ids, "validation users": experiment.validation_ids,
              "evaluation users": experiment.evaluation_ids}
    shown = [f"{name} {len(ids)}" for name, ids in counts.items() if ids or name == "public users"]
    return "not in N: " + ", ".join(shown)
