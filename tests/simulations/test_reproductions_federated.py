"""The federated reproductions (seeds 001, 002, 003): their sweeps are valid, their claims are
checked from the results by a written rule, and the StackOverflow one runs end to end (tiny)."""

from __future__ import annotations

import pytest

from fedpub.simulations.compare import load_sweep
from fedpub.simulations.reproductions import adadps_stackoverflow, budget_schedule_table2, dope_table7
from fedpub.simulations.reproductions.claims import Claim, verdicts

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them

CLAIM = Claim("a beats b", "a", "b")


def _rows(values: dict[tuple[str, float], list[float]]) -> list[dict]:
    return [
        {"strategy": label, "target_epsilon": eps, "epsilon": eps, "seed": seed, "eval_accuracy": value}
        for (label, eps), seeds in values.items() for seed, value in enumerate(seeds)
    ]


@pytest.mark.parametrize(
    "values, verdict",
    [
        ({("a", 1.0): [0.8, 0.82], ("b", 1.0): [0.7, 0.71], ("a", 2.0): [0.9], ("b", 2.0): [0.85]}, "**reproduced**"),
        ({("a", 1.0): [0.8, 0.82], ("b", 1.0): [0.9, 0.91], ("a", 2.0): [0.9], ("b", 2.0): [0.85]}, "**partly reproduced**"),
        ({("a", 1.0): [0.6], ("b", 1.0): [0.7]}, "**not reproduced**"),
        ({("a", 1.0): [0.6], ("b", 2.0): [0.7]}, "**not checked**"),
    ],
)
def test_a_claim_is_judged_from_the_means_at_every_epsilon(values, verdict):
    (line,) = verdicts(_rows(values), "accuracy", [CLAIM])
    assert verdict in line and line.startswith("- a beats b")


def test_a_gap_smaller_than_the_seeds_spread_is_said_to_be_so():
    (line,) = verdicts(_rows({("a", 1.0): [0.70, 0.80], ("b", 1.0): [0.74, 0.75]}), "accuracy", [CLAIM])
    assert "**reproduced**" in line and "within the seeds' spread" in line
    (clear,) = verdicts(_rows({("a", 1.0): [0.80, 0.81], ("b", 1.0): [0.70, 0.71]}), "accuracy", [CLAIM])
    assert "within" not in clear and "0.8050±0.0071 vs 0.7050±0.0071" in clear


@pytest.mark.parametrize("module", [dope_table7, budget_schedule_table2])
def test_each_reproduction_sweep_is_valid_and_runs_every_claimed_strategy(module):
    sweep = load_sweep(module.SWEEP)
    labels = {run.label for run in sweep.runs}
    assert {c.better for c in module.CLAIMS} | {c.worse for c in module.CLAIMS} <= labels
    assert sweep.headline == "accuracy"


def test_the_stackoverflow_reproduction_runs_end_to_end(tmp_path):
    path = adadps_stackoverflow.main(
        ["--seeds", "1", "--rounds", "1", "--data", str(tmp_path / "so"), "--out", str(tmp_path / "out")]
    )
    text = path.read_text()
    assert "AdaDPS with token frequencies beats DP-FedAvg" in text and "reproduced" in text
    assert (tmp_path / "out" / "compare.md").exists() and (tmp_path / "out" / "accuracy_vs_round.png").exists()
