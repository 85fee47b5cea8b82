"""Seed 000 (Amid et al. 2022, "Public data-assisted mirror descent for private model training", PDA-DPMD): its
claim about **conditioning**, with the dimension held fixed (fedpub issue 45, item 5).

Figure 1b's explanation is that PDA-DPMD's gain over warm-start DP-SGD is largest where the public Hessian is far
from the identity and shrinks as it nears it (§3; App. E: if H ∝ I, PDA-DPMD is DP-SGD). In Figure 1 the dimension p
and the conditioning move together (λ_max/λ_2 falls as p grows), so the figure cannot say which one the gain follows.
Here p is fixed (1,000, 10,000 private and 1,500 public samples, ε = 1, δ = 1e-5: the paper's regression, the data
and arms of :mod:`~fedpub.simulations.reproductions.pda_dpmd_linear_regression`) and the public Hessian's condition
number is swept by the value of the 40 head features, 0.05·s (s = 1 is the paper's): the head block of the Hessian
grows by s², and λ_max/λ_2 with it (at p = 1,000 about 4,750, 10,900, 36,300 and 138,000 at s = 1, 2, 4, 8; the
measured ratio is in the table). A seed's θ*, active coordinates and label noise are the same at every s.
``--epsilon 0.5`` runs the sweep at a second, smaller ε (fedpub issue 45, item 5: the papers' largest effects are
at ε ≈ 0.5) as its own record, ``pda_dpmd_conditioning_eps0.5``; the draws, batches and noise directions are the
same, only z is calibrated to the other ε.

**Arms**: warm-start DP-SGD, PDA-DPMD, and PDA-DPMD with a mis-specified Hessian (its coordinates permuted: the same
spectrum, the wrong directions; the control that removes the right directions and nothing else), all from the
public least-squares start. Each arm is tuned on its own grid (its learning rate in its own unit: 1/λ_max for
DP-SGD, 1/λ_min for the mirror steps) at each s, on :data:`TUNING_DRAWS` draws disjoint from the test seeds (the
mean empirical private loss), and run on the test seeds with the chosen point; the arms of a seed share its draw,
batches and noise. Headline: the **population (test) loss**, exact (0.01 at θ*). Every claim is also judged at a
shared point (:data:`SHARED_POINTS`, fedpub issue 45): PDA-DPMD at warm DP-SGD's epochs and C (the same noise) with
its lr re-tuned there, and the mis-specified Hessian at PDA-DPMD's own point, where only the directions differ; a
run whose lr factor was tuned to its grid's low edge (its private step switched off) makes its cells not testable.

**Claims**, judged by :mod:`~fedpub.simulations.reproductions.judge`: PDA-DPMD beats warm DP-SGD at every s
(paired); its gain grows with the condition number (consecutive levels ordered by the measured ratio, the gains'
Welch difference); the right Hessian beats the mis-specified one at every s (the control, paired).

    python -m fedpub.simulations.reproductions.pda_dpmd_conditioning [--scales 1,2,4,8] [--seeds 20]
        [--tuning-draws 3] [--epsilon 1] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from fedpub.atomic import atomic_path, write_text_atomic  # noqa: E402
from fedpub.simulations.reproductions import pda_dpmd_linear_regression as regression  # noqa: E402
from fedpub.simulations.reproductions.judge import (  # noqa: E402
    RULE,
    ClaimJudgement,
    Difference,
    paired_difference,
    welch_difference,
)
from fedpub.simulations.reproductions.paired import PairedClaim, paired_line, write_paired_json  # noqa: E402
from fedpub.simulations.reproductions.results_record import (  # noqa: E402
    ClaimRecord,
    ReproductionRecord,
    default_out,
    write_claims_json,
)
from fedpub.simulations.reproductions.tuning import Tuning, at_point  # noqa: E402

NAME = "pda_dpmd_conditioning"
DIM = 1000
SCALES = (1.0, 2.0, 4.0, 8.0)
SEEDS = 20
TUNING_DRAWS = regression.TUNING_DRAWS
ARMS = ("warm_dp_sgd", "pda_dpmd", "pda_misspecified")
SHARED_POINTS = {"pda_beats_warm": ("pda_dpmd", "warm_dp_sgd"), "gain_grows": ("pda_dpmd", "warm_dp_sgd"),
                 "control": ("pda_misspecified", "pda_dpmd")}
"""Per claim, the (arm, owner) of its judgement at a shared point
(:func:`~fedpub.simulations.reproductions.pda_dpmd_linear_regression.shared_points`): PDA-DPMD at warm DP-SGD's
epochs and C with its lr re-tuned there; the mis-specified Hessian at PDA-DPMD's whole point (only the directions
differ: the control that removes one mechanism)."""
POINTS = tuple(dict.fromkeys(SHARED_POINTS.values()))
"""Every shared-point run, once (two claims share PDA-DPMD at warm DP-SGD's point)."""
RUNS = (*ARMS, *(at_point(arm, owner) for arm, owner in POINTS))
TITLE = "Seed 000, §3: PDA-DPMD's gain against the public Hessian's conditioning, at a fixed dimension"
PAPER = ("Amid et al. 2022, \"Public data-assisted mirror descent for private model training\", §3, Figure 1b and "
         "App. E: the synthetic linear regression (the paper's at ε = 1, δ = 1e-5), here at p = 1,000 with the head "
         "features' value swept.")


def record_name(epsilon: float) -> str:
    """The record's name: :data:`NAME` at the paper's ε, ``<NAME>_eps<ε>`` at another (its own page entry)."""
    return NAME if epsilon == regression.EPSILON else f"{NAME}_eps{epsilon:g}"


@dataclass(frozen=True)
class Level:
    """One head scale s: its tuned choices and tunings, and each test seed's population loss per arm."""

    scale: float
    choices: Mapping[str, regression.Choice]
    tunings: Mapping[str, Tuning]
    losses: Mapping[str, Mapping[int, float]]
    conditions: tuple[float, ...]

    @property
    def condition(self) -> float:
        """λ_max/λ_2 of the public Hessian, the mean over the test seeds."""
        return statistics.fmean(self.conditions)

    @property
    def cell(self) -> str:
        return f"s={self.scale:g} (κ≈{self.condition:.0f})"

    def gain(self, warm: str = "warm_dp_sgd", pda: str = "pda_dpmd") -> list[float]:
        """Warm DP-SGD's loss minus PDA-DPMD's (the runs named), per seed."""
        return [self.losses[warm][s] - self.losses[pda][s] for s in sorted(self.losses[warm])]


def run_level(scale: float, seeds: int, grid: regression.Grid, *, dim: int, n_private: int, tuning_draws: int,
              accountant: str, epsilon: float) -> Level:
    """Tune the arms on ``tuning_draws`` draws at head scale ``scale`` and ``epsilon``, then the shared points, then
    run every test seed."""
    draws = regression.validation_draws(dim, n_private, tuning_draws, head_scale=scale)
    choices, tunings = regression.tune_on(draws, grid, accountant, ARMS, epsilon)
    shared, retuned = regression.shared_points(POINTS, draws, grid, accountant, choices, epsilon)
    choices |= shared
    tunings |= retuned
    losses: dict[str, dict[int, float]] = {run: {} for run in RUNS}
    conditions = []
    for seed in range(seeds):
        tick = time.perf_counter()
        draw = regression.prepare(dim, seed, n_private, head_scale=scale)
        for result in regression.evaluate(draw, seed, choices):
            losses[result.algorithm][seed] = result.population_loss
        conditions.append(draw.spectrum.largest / draw.spectrum.second_smallest)
        print(f"s={scale:g} seed={seed}: " + ", ".join(f"{a} {losses[a][seed]:.4f}" for a in RUNS)
              + f" (population loss; κ = {conditions[-1]:.1f}; {time.perf_counter() - tick:.1f} s)", flush=True)
    return Level(scale, choices, tunings, losses, tuple(conditions))


CLAIM_TEXTS = {
    "pda_beats_warm": ("PDA-DPMD beats warm-start DP-SGD at every conditioning level (test loss)",
                       "Fig. 1b: 'the loss of PDA-DPMD is never worse than that of warm-start DP-SGD'"),
    "gain_grows": ("PDA-DPMD's gain over warm-start DP-SGD grows with the public Hessian's condition number, at a "
                   "fixed dimension", "§3 and App. E: the advantage comes from the Hessian's departure from the "
                   "identity (if H ∝ I, PDA-DPMD is DP-SGD)"),
    "control": ("Control: PDA-DPMD with the right public Hessian beats it with a mis-specified one (same spectrum, "
                "coordinates permuted) at every level", "the mechanism: the Hessian's directions, not its spectrum"),
}
CLAIM_SIDES = {"pda_beats_warm": ("pda_dpmd", "warm_dp_sgd"), "gain_grows": ("gain at larger κ", "at smaller κ"),
               "control": ("pda_dpmd", "pda_misspecified")}
PAIRED = ("pda_beats_warm", "control")
"""The claims comparing two runs seed by seed (``paired.json``)."""


def claim_judgements(levels: Sequence[Level]) -> dict[str, ClaimJudgement]:
    """Each claim over its cells, at the arms' own points and (key ``regression.shared_key``) at
    :data:`SHARED_POINTS`; every claim is of every cell (an intersection–union test). A cell where a run's lr factor
    was tuned to its grid's low edge is not testable (``regression.step_gated``)."""
    ordered = sorted(levels, key=lambda level: level.condition)
    tunings = {(run, level.cell): t for level in levels for run, t in level.tunings.items()}
    lower = {"higher_is_better": False}

    def gated(difference: Difference, runs: Sequence[str], *at: Level) -> Difference:
        return regression.step_gated(difference, runs, tunings, *(level.cell for level in at))

    def judged(key: str, run: Callable[[str], str]) -> ClaimJudgement:
        warm, pda, wrong = run("warm_dp_sgd"), run("pda_dpmd"), run("pda_misspecified")
        if key == "gain_grows":
            cells = [gated(welch_difference(f"{a.cell}→{b.cell}", b.gain(warm, pda), a.gain(warm, pda)), (warm, pda),
                           a, b) for a, b in itertools.pairwise(ordered)]
        else:
            worse = warm if key == "pda_beats_warm" else wrong
            cells = [gated(paired_difference(level.cell, level.losses[pda], level.losses[worse], **lower), (pda, worse),
                           level) for level in ordered]
        return ClaimJudgement(tuple(cells), every=True)

    found = {key: judged(key, str) for key in CLAIM_TEXTS}
    return found | {regression.shared_key(key): judged(key, regression.runs_at(*point))
                    for key, point in SHARED_POINTS.items()}


def _pm(values: Sequence[float]) -> str:
    return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.4f}"


def table_markdown(levels: Sequence[Level], title: str) -> str:
    """Population loss per level (mean ± std over seeds), the gain, and each arm's tuned point."""
    lines = [f"# {title}", "", "Population (test) loss, mean ± std over seeds; 0.01 at θ*.", "",
             "| s | λ_max/λ_2 | warm DP-SGD | PDA-DPMD | mis-specified Hessian | PDA-DPMD at warm DP-SGD's epochs "
             "and C | mis-specified at PDA-DPMD's point | gain (warm − PDA) |", "|---|---|---|---|---|---|---|---|"]
    for level in sorted(levels, key=lambda level: level.condition):
        cells = [_pm(list(level.losses[run].values())) for run in RUNS]
        lines.append(f"| {level.scale:g} | {level.condition:.1f} | " + " | ".join(cells) + f" | {_pm(level.gain())} |")
    lines += ["", "Tuned points (each arm on its own grid at each s, on the tuning draws; `<arm>@<owner>`: the arm at "
              "the owner's point, its lr re-tuned there where their units differ):", "",
              "| s | arm | epochs | z | C | lr (factor) | released iterate |", "|---|---|---|---|---|---|---|"]
    for level in levels:
        for arm, c in level.choices.items():
            lines.append(f"| {level.scale:g} | {arm} | {c.schedule.epochs:g} | {c.noise_multiplier:.3f} | "
                         f"{c.clip_norm:g} | {c.lr:.4g} ({c.lr_factor:g}) | {c.output} |")
    return "\n".join(lines) + "\n"


def plot(path: Path, levels: Sequence[Level], dim: int, epsilon: float) -> None:
    """The gain (warm − PDA-DPMD, mean ± std over seeds) against λ_max/λ_2."""
    ordered = sorted(levels, key=lambda level: level.condition)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar([level.condition for level in ordered], [statistics.fmean(level.gain()) for level in ordered],
                yerr=[statistics.stdev(level.gain()) if len(level.gain()) > 1 else 0.0 for level in ordered],
                marker="o", capsize=3)
    ax.axhline(0.0, color="grey", linestyle="--", linewidth=1)
    ax.set(xscale="log", xlabel="λ_max/λ_2 of the public Hessian", ylabel="test loss: warm DP-SGD − PDA-DPMD",
           title=f"PDA-DPMD's gain at p = {dim}, ε = {epsilon:g}")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def tuning_summary(levels: Sequence[Level], tuning_draws: int) -> str:
    """One paragraph for claims.json: how the arms were tuned, with the budget and any point left on an edge."""
    evaluations = {arm: sum(level.tunings[arm].evaluations for level in levels) for arm in ARMS}
    edged = [f"s={level.scale:g} {arm} ({', '.join(t.on_edge)})" for level in levels
             for arm, t in level.tunings.items() if t.on_edge]
    return (f"Each arm tuned at each s on its own grid over (epochs, C, lr factor) on {tuning_draws} draws disjoint "
            f"from the test seeds (mean empirical private loss), edges extended at most twice; grid points per arm: "
            + ", ".join(f"{arm} {n}" for arm, n in evaluations.items()) + "; "
            + (f"still on a grid edge: {'; '.join(edged)}. " if edged else "no chosen value is on its grid's edge. ")
            + "Each claim is judged at the arms' own points and at a shared point (PDA-DPMD at warm DP-SGD's epochs "
            "and C with its lr re-tuned there; the mis-specified Hessian at PDA-DPMD's point); a run whose lr factor "
            "sits at its grid's low edge makes its cells not testable. Tuning is not counted in ε.")


def write_outputs(out: Path, levels: Sequence[Level], *, dim: int, seeds: int, tuning_draws: int, wall_time: float,
                  command: str, quick: bool, epsilon: float) -> list[str]:
    """table.md, figure.png, paired.json, comparison.md and claims.json; returns the claims' sentences."""
    name, title = record_name(epsilon), f"{TITLE}, ε = {epsilon:g}"
    write_text_atomic(out / "table.md", table_markdown(levels, title))
    plot(out / "figure.png", levels, dim, epsilon)
    judged, claims = claim_judgements(levels), regression.judged_claims(CLAIM_TEXTS, CLAIM_SIDES, SHARED_POINTS)
    lines = [judged[key].sentence(text, better, worse) for key, (text, better, worse, _) in claims.items()]
    values = {run: {level.cell: dict(level.losses[run]) for level in levels} for run in RUNS}
    cells = tuple(level.cell for level in sorted(levels, key=lambda level: level.condition))
    roles = {key: "control" if base == "control" else "claim" for base in PAIRED
             for key in (base, regression.shared_key(base))}
    paired = [PairedClaim(text, better, worse, cells, role=roles[key])
              for key, (text, better, worse, _) in claims.items() if key in roles]
    write_paired_json(out, name, "population (test) loss", False, values, paired)
    tuning = tuning_summary(levels, tuning_draws)
    write_text_atomic(out / "comparison.md", "\n".join([
        f"# {title}", "", PAPER, "", f"p = {dim}, s = {', '.join(f'{level.scale:g}' for level in levels)}, "
        f"ε = {epsilon:g}, δ = {regression.DELTA:g}, {seeds} seeds, wall time {wall_time:.0f} s. Population (test) "
        "loss, lower is better.", "", RULE, "", *lines, "",
        "Paired per seed (the arms share each seed's draw, batches and noise):", "",
        *(paired_line(values, claim, higher_is_better=False) for claim in paired), "", tuning, ""]))
    write_claims_json(out, ReproductionRecord(
        name, "000", title, PAPER, command, quick, seeds, wall_time, tuning, RULE,
        tuple(ClaimRecord.of(text, better, worse, judged[key], figure)
              for key, (text, better, worse, figure) in claims.items()),
        ("table.md", "comparison.md"), ("figure.png",)))
    return lines


def run(scales: Sequence[float], seeds: int, out: Path, grid: regression.Grid = regression.DEFAULT_GRID, *,
        dim: int = DIM, n_private: int = regression.N_PRIVATE, tuning_draws: int = TUNING_DRAWS,
        accountant: str = "pld", command: str = f"python -m fedpub.simulations.reproductions.{NAME}",
        quick: bool = False, epsilon: float = regression.EPSILON) -> list[str]:
    """Every level at ``epsilon`` (δ = 1e-5), then the outputs; prints progress."""
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    levels = []
    for scale in scales:
        tick = time.perf_counter()
        levels.append(run_level(scale, seeds, grid, dim=dim, n_private=n_private, tuning_draws=tuning_draws,
                                accountant=accountant, epsilon=epsilon))
        print(f"s={scale:g} done in {time.perf_counter() - tick:.0f} s (κ ≈ {levels[-1].condition:.1f})", flush=True)
    wall_time = time.perf_counter() - started
    lines = write_outputs(out, levels, dim=dim, seeds=seeds, tuning_draws=tuning_draws, wall_time=wall_time,
                          command=command, quick=quick, epsilon=epsilon)
    print("\n".join(lines))
    print(f"total wall time {wall_time:.1f} s; results in {out}")
    return lines


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,2,4,8",
                        help="head scales s, comma-separated (the 40 head features are 0.05·s; 1 is the paper's)")
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"test seeds per level (default {SEEDS})")
    parser.add_argument("--tuning-draws", type=int, default=TUNING_DRAWS,
                        help=f"draws the arms are tuned on, disjoint from the test seeds (default {TUNING_DRAWS})")
    parser.add_argument("--epsilon", type=float, default=regression.EPSILON,
                        help=f"ε of every arm (δ = {regression.DELTA:g}; default {regression.EPSILON:g}, the "
                             "paper's); another ε is its own record, <name>_eps<ε>")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"output folder (default {default_out(NAME, False)}, quick: {default_out(NAME, True)}; "
                             "at another ε the record's name in place of the last part)")
    parser.add_argument("--quick", action="store_true",
                        help="p = 250, s = 1 and 4, 600 private samples, the tiny grid, the RDP accountant, 3 seeds, "
                             "2 tuning draws: seconds, a check that the pipeline runs (its verdicts say nothing)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one is faster on a busy 2-core machine)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if not math.isfinite(args.epsilon) or args.epsilon <= 0:
        parser.error(f"--epsilon must be a finite number > 0, got {args.epsilon!r}")
    out = args.out or default_out(record_name(args.epsilon), args.quick)
    module = f"python -m fedpub.simulations.reproductions.{NAME}"
    at_epsilon = "" if args.epsilon == regression.EPSILON else f" --epsilon {args.epsilon:g}"
    if args.quick:
        run((1.0, 4.0), 3, out, regression.QUICK_GRID, dim=250, n_private=600, tuning_draws=2, accountant="rdp",
            command=f"{module} --quick{at_epsilon}", quick=True, epsilon=args.epsilon)
    else:
        scales = [float(v) for v in args.scales.split(",")]
        options = ("" if tuple(scales) == SCALES else f" --scales {args.scales}") + (
            "" if args.seeds == SEEDS else f" --seeds {args.seeds}") + (
            "" if args.tuning_draws == TUNING_DRAWS else f" --tuning-draws {args.tuning_draws}") + at_epsilon
        run(scales, args.seeds, out, tuning_draws=args.tuning_draws, command=module + options, epsilon=args.epsilon)
    return out


if __name__ == "__main__":
    main()
