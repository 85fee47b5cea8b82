"""The federated reproductions (seeds 001, 002, 003): their sweeps are valid and the StackOverflow one runs end to
end (tiny). How their claims are judged is tested in test_judge.py."""

from __future__ import annotations

import pytest

from fedpub.simulations.compare import load_sweep
from fedpub.simulations.reproductions import adadps_stackoverflow, budget_schedule_table2, dope_table7

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them


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
    assert "AdaDPS with token frequencies beats DP-FedAvg: **not judged**" in text  # one seed: no uncertainty
    assert (tmp_path / "out" / "compare.md").exists() and (tmp_path / "out" / "accuracy_vs_round.png").exists()
