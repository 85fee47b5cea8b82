"""The FLOP-bound floor of the throughput benchmark: the counted FLOPs of a round are the model's arithmetic."""

from __future__ import annotations

import pytest
import torch

from fedpub.config import parse_config
from fedpub.simulations.benchmarks.flop_floor import matmul_flops_per_second
from fedpub.simulations.benchmarks.throughput import _BareDP, _config, _floor, _rows, _summary, measure
from fedpub.simulations.run.experiment import build_experiment

MLP_FLOPS_PER_EXAMPLE = (
    2 * (784 * 200 + 200 * 200 + 200 * 10)  # forward: three matrix products
    + 2 * (784 * 200 + 200 * 200 + 200 * 10)  # backward, the weights' gradients
    + 2 * (200 * 200 + 200 * 10)  # backward, the gradients of the hidden layers' inputs (not of the images)
)


def test_counted_round_flops_are_the_mlp_arithmetic_of_every_example_trained(tmp_path):
    experiment = build_experiment(parse_config(_config("emnist_mlp", 5, 3, tmp_path)))
    flops: list[int] = []
    _floor(experiment, 3, flops=flops)
    examples = [
        sum(len(experiment.train.client_data(cid)) for cid in experiment.strategy.sample_cohort(experiment.private_ids, t))
        for t in range(3)
    ]
    assert all(n > 0 for n in examples)
    assert flops == [MLP_FLOPS_PER_EXAMPLE * n for n in examples]  # one epoch: every example once


def test_flop_floor_columns_divide_round_seconds_by_the_flops_at_the_matmul_rate():
    seconds = {"floor": [(9.0, 5), (1.0, 5), (3.0, 5), (9.0, 5)], "fedpub": [(9.0, 5), (0.5, 5), (1.5, 5), (9.0, 5)],
               "fedpub-loop": [(9.0, 5), (2.0, 5), (2.0, 5), (9.0, 5)],
               "dp-floor": [(9.0, 5), (4.0, 5), (4.0, 5), (9.0, 5)]}
    flops = [10**12, 4 * 10**9, 2 * 10**9, 10**12]  # the first and last rounds are not steady
    rows = {r["path"]: r for r in _rows("emnist_mlp", 5, "default", seconds, flops, flops_per_second=1e9, timing=[])}
    assert rows["fedpub"]["round_gflop"] == 3.0
    assert rows["fedpub"]["x_flop_floor"] == pytest.approx(1.0 / 3.0, abs=0.05)
    assert rows["floor"]["x_flop_floor"] == pytest.approx(2.0 / 3.0, abs=0.05)
    assert rows["fedpub"]["x_floor"] == 0.5 and rows["fedpub"]["x_dp_floor"] == 0.25


def test_matmul_rate_is_the_product_flops_over_its_time():
    rate = matmul_flops_per_second(torch.device("cpu"), size=256, repeats=2)
    assert 1e8 < rate < 1e14  # any CPU: between 0.1 GFLOP/s and 100 TFLOP/s


def test_the_summary_says_per_cell_whether_fedpub_is_within_the_target_of_the_floor_and_ahead_of_pfl():
    steady = lambda s, n=10: [(99.0, n), (s, n), (99.0, n)]  # noqa: E731 (only the middle round is steady)
    cells = {
        "emnist_cnn": {"floor": steady(1.0), "dp-floor": steady(1.1), "fedpub": steady(1.2),
                       "fedpub-loop": steady(1.5), "pfl-research": steady(2.0)},
        "emnist_mlp": {"floor": steady(1.0), "dp-floor": steady(1.2), "fedpub": steady(1.3),
                       "fedpub-loop": steady(1.4), "pfl-research": steady(1.25)},
        "so_logreg": {"floor": steady(2.0), "floor-cut": steady(1.0), "dp-floor": steady(3.0),
                      "dp-floor-cut": steady(0.9), "fedpub": steady(1.1), "fedpub-loop": steady(1.1)},
    }
    rows = [r for task, seconds in cells.items() for r in _rows(task, 10, "5-30", seconds, [1, 1, 1], 1e9, [])]
    summary = {r["task"]: r for r in _summary(rows, {("emnist_cnn", 10, "5-30"): "8-15: loop"})}
    assert [summary[t]["within_1.25x"] for t in cells] == ["yes", "no", "yes"]
    assert [summary[t]["within_1.10x_dp"] for t in cells] == ["yes", "yes", "no"]  # 1.2/1.1, 1.3/1.2, 1.1/0.9
    assert summary["so_logreg"]["dp_floor_s"] == 0.9 and summary["emnist_mlp"]["fedpub_x_dp_floor"] == 1.08
    assert [summary[t]["ahead_of_pfl"] for t in cells] == ["yes", "no", "-"]
    assert summary["so_logreg"]["floor_s"] == 1.0 and summary["emnist_cnn"]["fedpub_paths"] == "8-15: loop"
    assert summary["emnist_cnn"]["fedpub_vs_pfl"] == pytest.approx(2.0 / 1.2, abs=0.01)


def test_rounds_in_which_fedpub_timed_its_paths_leave_every_paths_steady_figures():
    """Round 1 timed groups both ways (its seconds hold both paths' work): every path's figures come from rounds 2
    and 3 alone, the same cohorts for each; a run that timed in every steady round keeps them all."""
    seconds = {"floor": [(9.0, 5), (1.0, 5), (2.0, 5), (2.0, 5), (9.0, 5)],
               "dp-floor": [(9.0, 5), (1.0, 5), (2.0, 5), (2.0, 5), (9.0, 5)],
               "fedpub": [(9.0, 5), (8.0, 5), (2.5, 5), (2.5, 5), (9.0, 5)],
               "fedpub-loop": [(9.0, 5), (1.0, 5), (3.0, 5), (3.0, 5), (9.0, 5)]}
    flops = [1] * 5
    rows = {r["path"]: r for r in _rows("emnist_mlp", 5, "default", seconds, flops, 1e9, timing=[1])}
    assert rows["fedpub"]["steady_rounds"] == rows["floor"]["steady_rounds"] == 2
    assert rows["fedpub"]["x_floor"] == 1.25 and rows["fedpub-loop"]["x_floor"] == 1.5
    everywhere = {r["path"]: r for r in _rows("emnist_mlp", 5, "default", seconds, flops, 1e9, timing=[1, 2, 3])}
    assert everywhere["fedpub"]["steady_rounds"] == 3 and everywhere["fedpub"]["steady_s_per_round"] == round(13.0 / 3, 4)


def test_every_path_of_a_cell_trains_the_same_cohorts(tmp_path):
    """The floor, fedpub's default and its loop train the same users each round (a run's cohorts derive from its
    name, so every path's run has the cell's name), so their seconds compare the same work."""
    times, _, _, timing = measure("emnist_mlp", 10, 4, tmp_path, flower_max_gb=0, pfl_python=None, examples=(5, 10))
    sizes = {label: [users for _, users in rounds] for label, rounds in times.items()}
    assert sizes.keys() == {"floor", "dp-floor", "fedpub", "fedpub-loop"}
    assert sizes["fedpub"] == sizes["floor"] == sizes["dp-floor"] == sizes["fedpub-loop"]
    assert len(set(sizes["floor"])) > 1
    assert set(timing["fedpub"]) <= set(range(4)) and timing["fedpub-loop"] == []  # a forced path times nothing


def test_the_dp_floor_clips_each_update_sums_them_and_writes_the_model_once_with_one_draw_of_noise(tmp_path):
    """Against the mechanism computed by hand: updates of norm 2C and C/2 (the first clipped to C), a cut user's
    update added into its columns, noise of std z·C from the seed's generator, lr / m on the noised sum."""
    experiment = build_experiment(parse_config(_config("emnist_mlp", 5, 3, tmp_path)))
    clip, z = experiment.config.strategy.clip_norm, experiment.noise_multiplier
    start = [torch.zeros(2, 4), torch.zeros(2)]
    params = [p.clone() for p in start]
    dp = _BareDP(experiment, params)
    dense = [torch.full((2, 4), 2 * clip / 8**0.5), torch.zeros(2)]  # norm 2C: clipped to C
    dp.add(dense, None)
    columns = torch.tensor([1, 3])
    cut = [torch.tensor([[clip / 2, 0.0], [0.0, 0.0]]), torch.zeros(2)]  # columns × out, norm C/2: kept
    dp.add(cut, columns)
    dp.release()
    noise = torch.empty(10).normal_(generator=torch.Generator().manual_seed(experiment.config.seed))
    expected_sum = [dense[0] / 2, torch.zeros(2)]
    expected_sum[0][0, 1] += clip / 2
    scale = experiment.config.strategy.server_optimizer.lr / experiment.config.strategy.sampling.clients_per_round
    expected = [s + z * clip * n.view_as(s) for s, n in zip(expected_sum, noise.split([8, 2]))]
    for got, want in zip(params, expected):
        torch.testing.assert_close(got, scale * want)
    assert all(total.abs().sum() == 0 for total in dp.sums)  # the next round's sum starts at zero
