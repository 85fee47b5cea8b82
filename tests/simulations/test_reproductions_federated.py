"""The federated reproductions' sweeps (seeds 001, 003) are valid. Their quick modes run in
test_reproductions_quick.py; how their claims are judged is tested in test_judge.py."""

from __future__ import annotations

import pytest

from fedpub.simulations.compare import load_sweep
import yaml

from fedpub.simulations.reproductions import (
    budget_schedule_table2,
    dope_table7,
    pda_dpmd_federated,
    public_epochs_figure4,
)
from fedpub.simulations.reproductions.federated import _sweep_file
from fedpub.simulations.reproductions.results_record import VERDICTS, read_claims_json

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them


@pytest.mark.parametrize("module", [dope_table7, budget_schedule_table2, pda_dpmd_federated, public_epochs_figure4])
def test_each_reproduction_sweep_is_valid_and_runs_every_claimed_strategy(module):
    sweep = load_sweep(module.SWEEP)
    labels = {run.label for run in sweep.runs} | {"public_only"}  # dope_table7's control runs outside the sweep
    assert {c.better for c in module.CLAIMS} | {c.worse for c in module.CLAIMS} <= labels
    assert sweep.headline == "accuracy"


def test_budget_schedule_boosts_one_round_of_60_at_the_papers_sigma_squared():
    for run in load_sweep(budget_schedule_table2.SWEEP).runs:
        schedule = run.config.strategy.budget_schedule
        assert run.config.rounds == 60 and schedule.boosted_rounds == 1
        assert schedule.boosted_noise_multiplier ** 2 == pytest.approx(0.6)


def test_pda_dpmd_and_warm_dp_fedavg_start_from_the_same_warm_model():
    runs = {run.label: run.config for run in load_sweep(pda_dpmd_federated.SWEEP).runs}
    assert runs["pda_dpmd"].strategy.warm_start == runs["dp_fedavg_warm"].strategy.warm_start is not None
    assert runs["dp_fedavg_cold"].strategy.warm_start is None


@pytest.mark.parametrize("module", [budget_schedule_table2, pda_dpmd_federated, public_epochs_figure4])
def test_each_quick_sweep_is_tiny_and_valid(module, tmp_path):
    sweep = load_sweep(_sweep_file(module.REPRODUCTION, tmp_path / "out", quick=True))
    assert {run.seed for run in sweep.runs} == {0, 1, 2} and len({run.target_epsilon for run in sweep.runs}) == 1
    assert all(run.config.rounds == 2 and run.config.data.synthetic.num_writers == 40 for run in sweep.runs)
    assert sweep.root == tmp_path / "out"
    assert yaml.safe_load((tmp_path / "out" / "sweep.yaml").read_text())["name"] == "out"


def test_the_budget_schedule_quick_mode_writes_claims_json(tmp_path):
    """The federated runner end to end (the other federated quick modes differ only in their sweep)."""
    budget_schedule_table2.main(["--quick", "--out", str(tmp_path / "out")])
    record = read_claims_json(tmp_path / "out" / "claims.json")
    assert record.quick and record.seeds == 3 and record.seed_paper == "001"
    assert [c.verdict in VERDICTS for c in record.claims] == [True]
    assert all((tmp_path / "out" / path).exists() for path in (*record.tables, *record.figures))

