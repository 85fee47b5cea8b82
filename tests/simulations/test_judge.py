"""The one claim judge of the reproductions (simulations/reproductions/judge.py): a win only when the difference
of the seeds' means exceeds its uncertainty (Welch's t at 95 %), ties and losses said as such, under 3 seeds not
judged, and a claim judged over its whole grid."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from fedpub.simulations.reproductions.claims import Claim, judge_claims
from fedpub.simulations.reproductions.judge import (
    MIN_SEEDS,
    ClaimJudgement,
    Estimate,
    judge_cell,
    welch_margin,
)


def test_an_estimate_is_the_mean_and_its_standard_error():
    estimate = Estimate.of([0.80, 0.82, 0.84])
    assert estimate.mean == pytest.approx(0.82) and estimate.n == 3
    assert estimate.se == pytest.approx(0.02 / math.sqrt(3))
    summary = Estimate.from_summary(0.82, 0.02, 3)
    assert (summary.mean, summary.se, summary.n) == (pytest.approx(0.82), pytest.approx(estimate.se), 3)


def test_the_margin_is_welchs_t_times_the_standard_error_of_the_difference():
    a, b = Estimate(0.8, 0.01, 3), Estimate(0.7, 0.01, 3)  # equal se and n: 4 degrees of freedom
    assert welch_margin(a, b) == pytest.approx(stats.t.ppf(0.975, 4) * math.sqrt(2) * 0.01)
    assert welch_margin(Estimate(0.8, 0.0, 3), Estimate(0.7, 0.0, 5)) == 0.0  # neither varies: any gap counts


@pytest.mark.parametrize(
    ("better", "worse", "higher_is_better", "outcome"),
    [
        ([0.80, 0.81, 0.82], [0.70, 0.71, 0.72], True, "win"),
        ([0.70, 0.80, 0.75], [0.74, 0.75, 0.745], True, "tie"),  # better on average, within the seeds' noise
        ([0.70, 0.71, 0.72], [0.80, 0.81, 0.82], True, "loss"),
        ([0.10, 0.11, 0.12], [0.20, 0.21, 0.22], False, "win"),  # a loss, such as MSE: lower is better
        ([0.80, 0.81], [0.70, 0.71, 0.72], True, "not judged"),
    ],
)
def test_a_cell_is_won_only_beyond_its_uncertainty(better, worse, higher_is_better, outcome):
    judged = judge_cell("ε=1", better, worse, higher_is_better=higher_is_better)
    assert judged.outcome == outcome
    assert str(judged).startswith("ε=1: ")


WIN, TIE, LOSS = ([0.8, 0.81, 0.82], [0.7, 0.71, 0.72]), ([0.7, 0.8, 0.75], [0.74, 0.75, 0.745]), \
    ([0.7, 0.71, 0.72], [0.8, 0.81, 0.82])


@pytest.mark.parametrize(
    ("cells", "verdict"),
    [
        ([WIN, WIN], "reproduced"),
        ([WIN, TIE], "partly reproduced"),
        ([TIE, TIE], "not reproduced"),
        ([TIE, LOSS], "refuted"),
        ([WIN, LOSS], "mixed"),
        ([WIN, ([0.8], [0.7])], "not judged"),
        ([], "not checked"),
    ],
)
def test_a_claim_is_judged_over_its_whole_grid(cells, verdict):
    judged = ClaimJudgement(tuple(judge_cell(f"cell {k}", *pair) for k, pair in enumerate(cells)))
    assert judged.verdict == verdict
    assert f"**{verdict}**" in judged.sentence("a beats b", "a", "b")


def _rows(values: dict[tuple[str, float], list[float]]) -> list[dict]:
    return [
        {"strategy": label, "target_epsilon": eps, "epsilon": eps, "seed": seed, "eval_accuracy": value}
        for (label, eps), seeds in values.items() for seed, value in enumerate(seeds)
    ]


def test_a_sweeps_claim_is_judged_at_every_epsilon_where_both_ran():
    claim = Claim("a beats b", "a", "b")
    (judged,) = judge_claims(_rows({("a", 1.0): WIN[0], ("b", 1.0): WIN[1], ("a", 2.0): TIE[0], ("b", 2.0): TIE[1],
                                    ("a", 4.0): [0.9] * MIN_SEEDS}), "accuracy", [claim])
    line = judged.sentence(claim.text, claim.better, claim.worse)
    assert line.startswith("- a beats b: **partly reproduced** — `a` vs `b`: 1 wins, 1 ties, 0 losses of 2 cells")
    assert "ε=1: 0.8100 ± 0.0058 (n=3) vs 0.7100 ± 0.0058 (n=3)" in line and "(tie)" in line
    (unchecked,) = judge_claims(_rows({("a", 1.0): WIN[0], ("b", 2.0): WIN[1]}), "accuracy", [claim])
    assert "**not checked**" in unchecked.sentence(claim.text, claim.better, claim.worse)
