"""The next round's noise drawn ahead in a background thread is the noise drawn without it, bit for bit; a
prefetch can be cancelled, and a process that exits while one draws exits cleanly."""

import os
import subprocess
import sys

import pytest
import torch

from fedpub import noise_prefetch
from fedpub.noise_prefetch import cancel_prefetch, draw_normals, prefetch_normals, standard_normals
from fedpub.steps.gaussian_noise import gaussian_noise
from fedpub.types import RoundContext

SPECS = [(torch.Size([300, 70]), torch.float32), (torch.Size([70]), torch.float32), (torch.Size([5]), torch.float64)]


def test_the_noise_step_gives_the_same_noise_and_state_with_and_without_prefetch():
    params = {"w": torch.zeros(300, 70), "b": torch.ones(70)}
    runs = {}
    for prefetch in (True, False):
        step = gaussian_noise(1.3, seed=7, prefetch=prefetch)
        state, noisy = step.init(params), []
        for t in range(4):
            ctx = RoundContext(round=t, seed=0, population=100, sampling_rate=0.1, expected_cohort=10, cohort_size=9)
            result = step.update(params, state, ctx=ctx, clip_norm=0.5)
            state = result.state
            noisy.append(result.updates)
            if prefetch:  # the next round's draws are under way, from the state this round left
                assert torch.equal(noise_prefetch._pending.state, state["rng"])
        runs[prefetch] = noisy, state
    for a, b in zip(runs[True][0], runs[False][0], strict=True):
        assert all(torch.equal(a[k], b[k]) for k in params)
    assert torch.equal(runs[True][1]["rng"], runs[False][1]["rng"])
    assert not torch.equal(runs[True][0][0]["w"], runs[True][0][1]["w"])  # each round's noise is fresh


def test_a_prefetch_is_handed_over_only_to_the_same_state_and_specs():
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    expected = draw_normals(SPECS, torch.Generator().manual_seed(3))
    prefetch_normals(SPECS, state)
    job = noise_prefetch._pending
    drawn = standard_normals(SPECS, generator)
    assert noise_prefetch._pending is None and all(d is j for d, j in zip(drawn, job.draws, strict=True))
    assert all(torch.equal(d, e) for d, e in zip(drawn, expected, strict=True))
    follow = torch.Generator().manual_seed(3)
    draw_normals(SPECS, follow)
    assert torch.equal(generator.get_state(), follow.get_state())  # left past the draws
    # another state, or other shapes: drawn in place, from the generator itself
    prefetch_normals(SPECS, state)
    other = torch.Generator().manual_seed(4)
    assert torch.equal(standard_normals(SPECS, other)[0], draw_normals(SPECS, torch.Generator().manual_seed(4))[0])
    prefetch_normals(SPECS, state)
    again = torch.Generator().manual_seed(3)
    assert torch.equal(standard_normals(SPECS[:1], again)[0], expected[0])


def test_training_beside_a_drawing_prefetch_leaves_it_a_core_and_gets_its_threads_back():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with noise_prefetch.core_left_for_draws():
            assert torch.get_num_threads() == 2  # nothing is drawing
        big = [(torch.Size([4000, 4000]), torch.float32)]  # long enough to be drawing still
        prefetch_normals(big, torch.Generator().manual_seed(0).get_state())
        with noise_prefetch.core_left_for_draws():
            assert noise_prefetch.drawing() and torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        standard_normals(big, torch.Generator().manual_seed(0))  # takes the prefetch: nothing left drawing
        assert not noise_prefetch.drawing()
        small = [(torch.Size([100, 100]), torch.float32)]  # ends long before a core would pay: none is left
        prefetch_normals(small, torch.Generator().manual_seed(1).get_state())
        with noise_prefetch.core_left_for_draws():
            assert torch.get_num_threads() == 2
        standard_normals(small, torch.Generator().manual_seed(1))
    finally:
        torch.set_num_threads(threads)


def test_a_cancelled_prefetch_stops_and_its_round_draws_the_same_noise_in_place():
    specs = [(torch.Size([2000, 2000]), torch.float32)] * 20  # far longer than the test takes to cancel it
    prefetch_normals(specs, torch.Generator().manual_seed(5).get_state())
    job = noise_prefetch._pending
    cancel_prefetch()
    assert noise_prefetch._pending is None and not job.thread.is_alive() and job.draws is None
    replaced = [(torch.Size([2000, 2000]), torch.float32)] * 20
    prefetch_normals(replaced, torch.Generator().manual_seed(6).get_state())
    first = noise_prefetch._pending
    prefetch_normals(SPECS, torch.Generator().manual_seed(5).get_state())  # replaces it: it is cancelled
    first.thread.join()
    assert first.draws is None
    drawn = standard_normals(SPECS, torch.Generator().manual_seed(5))
    assert all(torch.equal(d, e) for d, e in zip(drawn, draw_normals(SPECS, torch.Generator().manual_seed(5)),
                                                 strict=True))
    cancel_prefetch()  # nothing pending: nothing to do


ONE_ROUND = """
import torch
from fedpub.config import StrategyConfig
from fedpub.privacy.events import PoissonSampling
from fedpub.strategies.compose import build_strategy

core = build_strategy(StrategyConfig(clip_norm=1.0, noise_multiplier=1.0), sampling=PoissonSampling(0.1),
                      population=100, noise_multiplier=1.0, seed=0, rounds=1)
params = {"w": torch.zeros(2_000_000)}  # the next round's 2M draws are still drawing as the script returns
outcome = core.aggregate(params, [{"w": torch.full((2_000_000,), 0.01)}] * 3, core.init(params), 0)
print("aggregated", float(outcome.params["w"].std()))
"""


@pytest.mark.parametrize("runs", [4, pytest.param(50, marks=pytest.mark.stress)])
def test_a_script_that_aggregates_one_round_and_exits_exits_cleanly(runs, request):
    expression = str(request.config.getoption("markexpr") or "")
    if runs == 50 and ("stress" not in expression or "not stress" in expression):
        pytest.skip("50 interpreter starts (~3 min on 2 cores); select it with -m stress")
    # issue 32: with a daemon drawing thread, 13 of 20 runs of this script aborted after their last line
    # ("terminate called without an active exception", exit 134): the interpreter finalized under it
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    failed = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", ONE_ROUND], capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0 or "aggregated" not in done.stdout:
            failed.append((done.returncode, done.stderr[-300:]))
    assert failed == []
