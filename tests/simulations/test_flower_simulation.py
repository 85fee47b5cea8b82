"""The same strategy in Flower's Simulation Engine (real Flower, real Ray) and in-process.

Failed, late and malformed replies in Flower simulation are tested in ``test_faults.py``."""

from __future__ import annotations

import json
import math

import pytest
import torch

from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.flower.simulation import run_flower_simulation
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them

FLOWER = {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 180}


def _in_process(cfg):
    return run_in_process(build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name))


@pytest.mark.parametrize(
    "strategy",
    [
        {"clip_norm": 0.5, "noise_multiplier": 0.8},
        pytest.param({"clip_norm": math.inf, "noise_multiplier": 0.0}, marks=pytest.mark.extended),
    ],
    ids=["noise_on", "noise_off"],
)
def test_flower_simulation_gives_the_in_process_model(tiny_emnist_dir, tmp_path, strategy):
    make = lambda where: tiny_config(tiny_emnist_dir, tmp_path / where, rounds=2, strategy=strategy, flower=FLOWER)
    local = _in_process(make("inprocess"))
    flower = run_flower_simulation(make("flower"), num_supernodes=16)
    for k in local.params:
        torch.testing.assert_close(flower.params[k], local.params[k], rtol=1e-5, atol=1e-6)
    assert flower.epsilon == pytest.approx(local.epsilon)
    records = [json.loads(x) for x in (tmp_path / "flower/tiny/metrics.jsonl").read_text().splitlines()]
    local_records = [json.loads(x) for x in (tmp_path / "inprocess/tiny/metrics.jsonl").read_text().splitlines()]
    diagnostics = [RunDirectory(tmp_path / where / "tiny").read_diagnostics() for where in ("flower", "inprocess")]
    assert [r["cohort_sampled"] for r in diagnostics[0]] == [r["cohort_sampled"] for r in diagnostics[1]]
    assert set(records[0]) == set(local_records[0])  # the same results, written the same way
