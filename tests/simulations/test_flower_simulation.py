"""The same strategy in Flower's Simulation Engine (real Flower, real Ray) and in-process."""

from __future__ import annotations

import json
import math

import pytest
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from clients.client_app import query_reply, train_reply
from fedpub.privacy.accountant import epsilon_for
from fedpub.privacy.events import PoissonSampling
from simulations.engine import run_in_process
from simulations.experiment import build_experiment
from simulations.flower_simulation import run_flower_simulation
from simulations.run_dir import RunDirectory
from tests.conftest import tiny_config

FLOWER = {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 180}


def _in_process(cfg):
    return run_in_process(build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name))


@pytest.mark.parametrize(
    "strategy",
    [
        {"clip_norm": 0.5, "noise_multiplier": 0.8},
        {"clip_norm": math.inf, "noise_multiplier": 0.0},
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
    assert [r["cohort_sampled"] for r in records] == [r["cohort_sampled"] for r in local_records]
    assert set(records[0]) == set(local_records[0])  # the same results, written the same way


def test_a_node_that_crashes_mid_round_does_not_stop_the_run(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=2, flower=FLOWER)
    experiment = build_experiment(cfg)
    victim = experiment.strategy.sample_cohort(experiment.private_ids, 0)[0]

    crashing = ClientApp()

    @crashing.query()
    def query(msg: Message, context: Context) -> Message:
        return query_reply(msg, context, cfg)

    @crashing.train()
    def train(msg: Message, context: Context) -> Message:
        if msg.content["config"]["client-id"] == victim and int(msg.content["config"]["round"]) == 0:
            raise RuntimeError("simulated crash of one node")
        return train_reply(msg, context, cfg)

    from flwr.simulation import run_simulation

    from simulations.server_app import make_server_app

    results = []
    run_simulation(
        server_app=make_server_app(cfg, results=results),
        client_app=crashing,
        num_supernodes=16,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
    )
    (result,) = results
    assert result.rounds_done == 2
    records = [json.loads(x) for x in (tmp_path / "tiny/metrics.jsonl").read_text().splitlines()]
    assert records[0]["cohort_failed"] == 1.0 and records[1]["cohort_failed"] == 0.0
    # the mechanism is unchanged: same denominator, same noise, same accounting
    assert records[0]["aggregate/expected_cohort"] == 4.0
    assert records[0]["noise/noise_std"] == pytest.approx(0.8 * 0.5 / 4.0)
    assert result.epsilon == pytest.approx(epsilon_for(PoissonSampling(4 / 16), 0.8, 2, 1e-5))
