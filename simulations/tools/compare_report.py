"""Tables and plots comparing runs, shared by ``fedpub compare`` (a sweep) and ``fedpub report``.

One row per run (``compare.csv``): strategy label, target ε, seed, ε achieved and δ (from the
run's ledger), the noise multiplier z of its first round's noisy sum, rounds done, every final test
metric and whose test examples evaluated it (``evaluated_on``: an evaluation on private users' examples is said so
in the tables and plots). Only released figures: no diagnostic (the rounds' wall time, the realised cohorts, the
norms) stands beside them; each run's ``diagnostics.jsonl`` keeps those, outside DP. The
markdown table (``compare.md``) has one row per (strategy, ε): mean ± std over seeds, the task's
headline metric first, then each strategy minus the first one, paired by seed (mean difference of the headline, its
95 % t interval and how many seeds it led on). Two plots: the headline metric against ε (error bars: std over
seeds) and against the round (mean over seeds, one panel per ε).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from scipy import stats  # noqa: E402

from fedpub.atomic import atomic_path, write_text_atomic  # noqa: E402
from fedpub.tasks import get_task  # noqa: E402
from fedpub.simulations.run.run_dir import RunDirectory  # noqa: E402

Row = dict[str, Any]
Curve = list[tuple[int, float]]
"""(round, headline test metric) of each evaluation of a run."""

ROW_KEYS = (
    "strategy", "target_epsilon", "seed", "epsilon", "delta", "noise_multiplier", "rounds_done", "evaluated_on"
)
TEXT_KEYS = ("strategy", "evaluated_on")
CSV_FILE, TABLE_FILE = "compare.csv", "compare.md"
EPSILON_PLOT, ROUND_PLOT = "accuracy_vs_epsilon.png", "accuracy_vs_round.png"
OUTPUT_FILES = (CSV_FILE, TABLE_FILE, EPSILON_PLOT, ROUND_PLOT)
RUN_NAME = re.compile(r"^(?P<label>.+?)__eps[^_]+__seed-?\d+$")
TEST_METRIC = re.compile(r"^([a-z]+_)?(eval|val)_\w+$")
"""A final test metric: ``eval_*``, or ``avg_eval_*`` / ``private_eval_*`` (model average, model reuse); or its
validation twin ``val_*`` (``data.validation``'s users, what the reproductions tune on)."""


def run_name(label: str, target_epsilon: float, seed: int) -> str:
    """The name of a sweep's run, ``<label>__eps<ε>__seed<seed>`` (``fedpub report`` reads the label back)."""
    return f"{label}__eps{target_epsilon:g}__seed{seed}"


@dataclass(frozen=True)
class ComparedRun:
    row: Row
    curve: Curve
    headline: str
    """The task's headline metric (``Task.headline``), e.g. ``accuracy``."""
    setting: str = ""
    """The run's data and rounds in words (runs of one sweep share them; ``fedpub report`` says when they differ)."""


class ReportError(ValueError):
    """A run directory that cannot be compared (unfinished, or another task than the others)."""


def _stored_config(run_dir: RunDirectory) -> dict[str, Any]:
    """The run's resolved config as a plain mapping (read raw: older runs need not fit today's schema)."""
    if not run_dir.root.is_dir():
        raise ReportError(f"{run_dir.root} does not exist")
    text = run_dir.stored_config()
    if text is None or not run_dir.ledger_path.exists():
        raise ReportError(f"{run_dir.root} is not a finished run: it has no config.yaml or ledger.json")
    return yaml.safe_load(text)


def _first_noise_multiplier(event: Mapping[str, Any]) -> float | None:
    """The noise multiplier of the first Gaussian in a ledger's event (round 1's noisy sum)."""
    if "noise_multiplier" in event:
        return float(event["noise_multiplier"])
    children = [event.get("event"), *event.get("events", [])]
    found = (_first_noise_multiplier(c) for c in children if isinstance(c, Mapping))
    return next((z for z in found if z is not None), None)


def read_run(
    run_dir: RunDirectory, label: str | None = None, final_metrics: Mapping[str, float] | None = None
) -> ComparedRun:
    """A finished run's row and curve. ``label`` defaults to the ``<label>`` of a sweep's run name, else
    the run's ``strategy.name``; ``final_metrics`` (a RunResult's) default to the run's stored
    ``final_metrics.json``, else its last evaluation."""
    config = _stored_config(run_dir)
    ledger = json.loads(run_dir.ledger_path.read_text(encoding="utf-8"))
    records = run_dir.read_metrics()
    headline = get_task(config["task"]).headline
    stored_final = run_dir.read_final_metrics()
    if final_metrics is None:
        final_metrics = stored_final
    if final_metrics is None:
        final_metrics = next((r for r in reversed(records) if f"eval_{headline}" in r), {})
    if label is None:
        match = RUN_NAME.match(config["name"])
        label = match["label"] if match else config["strategy"]["name"]
    row = {
        "strategy": label,
        "target_epsilon": config["strategy"].get("target_epsilon"),
        "seed": config["seed"],
        "epsilon": float(ledger["epsilon"]),
        "delta": float(ledger["delta"]),
        "noise_multiplier": _first_noise_multiplier(ledger["event"]),
        "rounds_done": ledger["rounds"],
        "evaluated_on": (stored_final or {}).get("evaluated_on"),
        **{k: float(final_metrics[k]) for k in _metric_keys([final_metrics], headline)},
    }
    data = config["data"]
    setting = f"data {data['source']} at {data['path']}, {config['rounds']} rounds"
    return ComparedRun(row, eval_curve(records, headline), headline, setting)


def eval_curve(records: Sequence[Mapping[str, Any]], headline: str) -> Curve:
    """The run's headline test metric at each evaluated round (rounds counted from 1)."""
    key = f"eval_{headline}"
    return [(int(r["round"]) + 1, float(r[key])) for r in records if key in r]


def _metric_keys(rows: Sequence[Mapping[str, Any]], headline: str) -> list[str]:
    """The test metrics of ``rows``, the headline first."""
    keys = {k for row in rows for k in row if TEST_METRIC.match(k)}
    return sorted(keys, key=lambda k: (k != f"eval_{headline}", k))


# -- compare.csv ---------------------------------------------------------------------------
def csv_text(rows: Sequence[Row], headline: str) -> str:
    columns = [*ROW_KEYS, *_metric_keys(rows, headline)]
    out = io.StringIO()
    # a recorded row's other keys (wall_time_s, in a sweep recorded before diagnostics left compare.csv) stay out
    writer = csv.DictWriter(out, columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def read_csv(path: Path) -> list[Row]:
    """The rows of a ``compare.csv`` with their numbers parsed (an empty cell is None)."""
    def value(key: str, text: str) -> Any:
        if key in TEXT_KEYS or text == "":
            return text or None
        return int(text) if key in ("seed", "rounds_done") else float(text)

    with path.open(newline="", encoding="utf-8") as f:
        return [{k: value(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


# -- grouping: one (strategy, ε) over seeds -------------------------------------------------
def group_epsilon(row: Mapping[str, Any]) -> float:
    """The ε a row is compared at: its target, or (a run with a fixed z) its ε achieved to 3 digits."""
    target = row["target_epsilon"]
    return float(target) if target is not None else float(f"{row['epsilon']:.3g}")


def _groups(runs: Sequence[ComparedRun]) -> Iterator[tuple[str, float, list[ComparedRun]]]:
    """(strategy, ε, runs) in the order strategies first appear, ε ascending."""
    order = {label: i for i, label in enumerate(_labels(runs))}
    key = lambda r: (order[r.row["strategy"]], group_epsilon(r.row))  # noqa: E731
    for (_, epsilon), members in groupby(sorted(runs, key=key), key=key):
        members = list(members)
        yield members[0].row["strategy"], epsilon, members


def _labels(runs: Sequence[ComparedRun]) -> list[str]:
    """The strategy labels in the order they first appear."""
    return list(dict.fromkeys(r.row["strategy"] for r in runs))


def _values(runs: Sequence[ComparedRun], key: str) -> list[float]:
    return [float(r.row[key]) for r in runs if r.row.get(key) is not None]


def _stats(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value, nan for none)."""
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def markdown_table(runs: Sequence[ComparedRun], title: str) -> str:
    headline = runs[0].headline
    metrics = _metric_keys([r.row for r in runs], headline)
    header = ["strategy", "ε",
              *(k.replace("eval_", "test ").replace("val_", "validation ").replace("_", " ") for k in metrics),
              "ε achieved", "z", "seeds"]
    lines = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, epsilon, members in _groups(runs):
        cells = [label, f"{epsilon:g}"]
        for key in metrics:
            values = [v for v in _values(members, key) if not math.isnan(v)]
            mean, std = _stats(values)
            cells.append("—" if not values else f"{mean:.4f} ± {std:.4f}" if len(values) > 1 else f"{mean:.4f}")
        means = {key: _stats(_values(members, key))[0] for key in ("epsilon", "noise_multiplier")}
        cells += [f"{means['epsilon']:.4g}", f"{means['noise_multiplier']:.4g}", str(len(members))]
        lines.append("| " + " | ".join(cells) + " |")
    deltas = ", ".join(f"{d:g}" for d in sorted({r.row["delta"] for r in runs}))
    lines += [
        "",
        f"Mean ± standard deviation over seeds of the final test metrics; user-level ε at δ = {deltas}, "
        "z the noise multiplier of the first round's noisy sum. "
        "Hyper-parameter tuning is not counted in ε. — : the metric does not apply (e.g. `private test` is the "
        "last private model before model reuse).",
        f"Evaluated on {evaluated_on(runs)}.",
    ]
    settings = sorted({r.setting for r in runs if r.setting})
    if len(settings) > 1:
        lines.append("**The runs differ in their data or rounds**, so their rows are not like for like: "
                     + "; ".join(settings) + ".")
    if any(r.row["target_epsilon"] is None for r in runs):
        lines.append("Runs with a fixed noise multiplier are listed at the ε they achieved (3 digits).")
    return "\n".join(lines) + "\n"


def paired_table(runs: Sequence[ComparedRun]) -> str:
    """Each strategy minus the first (the reference) in the headline metric, paired by seed at each ε: the mean
    difference, its 95 % t interval over the seeds both ran and the seeds on which it led; "" with one strategy or no
    ε with two shared seeds. Seeds share the data and the initial model; the privacy draws (cohorts, noise) are the
    same only where the configs set ``privacy.draws_key``."""
    labels, headline = _labels(runs), _metric_keys([r.row for r in runs], runs[0].headline)[0]
    by_cell = {(label, epsilon): {r.row["seed"]: r.row.get(headline) for r in members}
               for label, epsilon, members in _groups(runs)}
    epsilons = sorted({epsilon for _, epsilon in by_cell})
    lines = []
    for label in labels[1:]:
        for epsilon in epsilons:
            ours, theirs = by_cell.get((label, epsilon), {}), by_cell.get((labels[0], epsilon), {})
            diffs = [float(ours[s]) - float(theirs[s]) for s in sorted(set(ours) & set(theirs), key=str)
                     if ours[s] is not None and theirs[s] is not None]
            if len(diffs) < 2:
                continue
            mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
            half = stats.t.ppf(0.975, len(diffs) - 1) * sd / math.sqrt(len(diffs))
            lines.append(f"| {label} | {epsilon:g} | {mean:+.4f} | [{mean - half:+.4f}, {mean + half:+.4f}] | "
                         f"{sum(d > 0 for d in diffs)} of {len(diffs)} |")
    if not lines:
        return ""
    name = headline.replace("eval_", "test ").replace("_", " ")
    return "\n".join([
        f"## Against `{labels[0]}`, paired by seed", "",
        f"| strategy | ε | {name} minus `{labels[0]}`'s | 95 % CI (t over seeds) | seeds ahead |",
        "|---|---|---|---|---|", *lines, "",
        "Each seed's runs share the data and the initial model; their cohorts and noise are drawn apart unless the "
        "configs set `privacy.draws_key`. An interval that holds 0 does not tell the two apart on these seeds.",
    ]) + "\n"


def evaluated_on(runs: Sequence[ComparedRun]) -> str:
    """Whose test examples the runs were evaluated on, in words (private users' are said so)."""
    labels = sorted({str(r.row.get("evaluated_on") or "unrecorded test examples") for r in runs})
    return " / ".join(labels)


# -- plots ------------------------------------------------------------------------------------
def _save(fig: plt.Figure, path: Path) -> None:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def plot_metric_vs_epsilon(runs: Sequence[ComparedRun], path: Path) -> None:
    headline = runs[0].headline
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    points: dict[str, list[tuple[float, float, float]]] = {}
    for label, epsilon, members in _groups(runs):
        points.setdefault(label, []).append((epsilon, *_stats(_values(members, f"eval_{headline}"))))
    for label, values in points.items():
        xs, means, stds = zip(*values)
        ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3, label=label)
    epsilons = [group_epsilon(r.row) for r in runs]
    if max(epsilons) > 10 * min(epsilons):
        ax.set_xscale("log")
    ax.set_xlabel("user-level ε")
    ax.set_ylabel(f"final test {headline}")
    ax.set_title(f"evaluated on {evaluated_on(runs)}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, path)


def _mean_curve(curves: Sequence[Curve]) -> Curve:
    """The mean over runs at each round (over the runs evaluated at that round)."""
    by_round: dict[int, list[float]] = {}
    for curve in curves:
        for t, value in curve:
            by_round.setdefault(t, []).append(value)
    return [(t, statistics.fmean(v)) for t, v in sorted(by_round.items())]


def plot_metric_vs_round(runs: Sequence[ComparedRun], path: Path) -> None:
    headline = runs[0].headline
    epsilons = sorted({group_epsilon(r.row) for r in runs})
    fig, axes = plt.subplots(1, len(epsilons), figsize=(4.0 * len(epsilons) + 1, 3.8), sharey=True, squeeze=False)
    panel = {epsilon: ax for epsilon, ax in zip(epsilons, axes[0])}
    colors = {label: f"C{i}" for i, label in enumerate(_labels(runs))}
    for label, epsilon, members in _groups(runs):
        curve = _mean_curve([m.curve for m in members])
        if curve:
            panel[epsilon].plot(*zip(*curve), "o-", color=colors[label], label=label, markersize=3)
    for epsilon, ax in panel.items():
        ax.set_title(f"ε = {epsilon:g}")
        ax.set_xlabel("rounds completed")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"test {headline} (mean over seeds)")
    fig.suptitle(f"evaluated on {evaluated_on(runs)}", fontsize=9)
    axes[0][-1].legend()
    _save(fig, path)


def write_comparison(out_dir: Path, runs: Sequence[ComparedRun], title: str) -> str:
    """Write compare.csv, compare.md and the two plots into ``out_dir``; return the markdown."""
    headlines = {r.headline for r in runs}
    if len(headlines) != 1:
        raise ReportError(f"runs of different tasks cannot share a table (headline metrics: {sorted(headlines)})")
    out_dir = Path(out_dir)
    write_text_atomic(out_dir / CSV_FILE, csv_text([r.row for r in runs], runs[0].headline))
    table = markdown_table(runs, title)
    if paired := paired_table(runs):
        table += "\n" + paired
    write_text_atomic(out_dir / TABLE_FILE, table)
    plot_metric_vs_epsilon(runs, out_dir / EPSILON_PLOT)
    plot_metric_vs_round(runs, out_dir / ROUND_PLOT)
    return table


def report_runs(paths: Sequence[Path], out_dir: Path) -> str:
    """``fedpub report``: the comparison of existing run directories, written into ``out_dir``."""
    runs = [read_run(RunDirectory(p)) for p in paths]
    return write_comparison(out_dir, runs, f"Comparison of {len(runs)} runs")
