import importlib.util

import dp_accounting
import pytest
import torch

from fedpub.steps.gaussian_noise import gaussian_noise
from fedpub.types import RoundContext


def test_measured_std_on_the_mean_is_z_c_over_m():
    z, c, m = 1.7, 0.8, 25.0
    params = {"w": torch.zeros(400_000)}
    ctx = RoundContext(round=0, seed=0, population=250, sampling_rate=0.1, expected_cohort=m, cohort_size=23)
    step = gaussian_noise(z, seed=3)
    result = step.update(params, step.init(params), ctx=ctx, clip_norm=c)
    noise = result.updates["w"].double()
    expected = z * c / m
    # the sample std of 400k normals is within 0.5% of the truth with overwhelming probability
    assert abs(noise.std().item() / expected - 1) < 0.01
    assert abs(noise.mean().item()) < 5 * expected / 400_000**0.5
    assert result.metrics["noise_std"] == pytest.approx(expected)
    assert result.events == (dp_accounting.GaussianDpEvent(z),)


def test_a_noise_multiplier_input_sets_this_rounds_z():
    z_input, c, m = 0.6, 2.0, 10.0
    params = {"w": torch.zeros(400_000)}
    ctx = RoundContext(round=0, seed=0, population=100, sampling_rate=0.1, expected_cohort=m, cohort_size=10)
    step = gaussian_noise(3.0, seed=4)
    result = step.update(params, step.init(params), ctx=ctx, clip_norm=c, noise_multiplier=z_input)
    expected = z_input * c / m
    assert abs(result.updates["w"].double().std().item() / expected - 1) < 0.01
    assert result.metrics["noise_multiplier"] == z_input
    assert result.metrics["noise_std"] == pytest.approx(expected)
    assert result.events == (dp_accounting.GaussianDpEvent(z_input),)
    default = step.update(params, step.init(params), ctx=ctx, clip_norm=c, noise_multiplier=None)
    assert default.events == (dp_accounting.GaussianDpEvent(3.0),)


@pytest.mark.parametrize("bad", [-0.5, float("inf"), float("nan")])
def test_an_invalid_noise_multiplier_input_is_refused(params, ctx, bad):
    step = gaussian_noise(1.0, seed=1)
    with pytest.raises(ValueError, match="noise_multiplier must be a finite number >= 0"):
        step.update(params, step.init(params), ctx=ctx, clip_norm=1.0, noise_multiplier=bad)


def test_different_seeds_give_different_noise(params, ctx):
    a, b = gaussian_noise(1.0, seed=1), gaussian_noise(1.0, seed=2)
    ra = a.update(params, a.init(params), ctx=ctx, clip_norm=1.0)
    rb = b.update(params, b.init(params), ctx=ctx, clip_norm=1.0)
    assert not torch.equal(ra.updates["w"], rb.updates["w"])


def test_successive_rounds_draw_fresh_noise(params, ctx):
    step = gaussian_noise(1.0, seed=1)
    first = step.update(params, step.init(params), ctx=ctx, clip_norm=1.0)
    second = step.update(params, first.state, ctx=ctx, clip_norm=1.0)
    assert not torch.equal(first.updates["w"], second.updates["w"])


def test_zero_noise_is_the_identity_and_costs_a_non_private_event(params, ctx):
    step = gaussian_noise(0.0, seed=1)
    result = step.update(params, step.init(params), ctx=ctx, clip_norm=float("inf"))
    for k in params:
        assert torch.equal(result.updates[k], params[k])


def test_noise_with_unbounded_sensitivity_is_refused(params, ctx):
    step = gaussian_noise(1.0, seed=1)
    with pytest.raises(ValueError, match="finite clip_norm"):
        step.update(params, step.init(params), ctx=ctx, clip_norm=float("inf"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_noise_for_a_model_on_the_gpu_is_drawn_there_with_the_measured_std_and_reproduced_by_the_seed():
    z, c, m = 1.7, 0.8, 25.0
    params = {"w": torch.zeros(400_000, device="cuda")}
    ctx = RoundContext(round=0, seed=0, population=250, sampling_rate=0.1, expected_cohort=m, cohort_size=23)
    step = gaussian_noise(z, seed=3)
    first = step.update(params, step.init(params), ctx=ctx, clip_norm=c)
    again = step.update(params, step.init(params), ctx=ctx, clip_norm=c)
    noise = first.updates["w"]
    assert noise.device.type == "cuda" and torch.equal(noise, again.updates["w"])
    assert abs(noise.double().std().item() / (z * c / m) - 1) < 0.01


@pytest.mark.skipif(importlib.util.find_spec("opendp") is None, reason="OpenDP (the secure-noise extra) is missing")
def test_the_secure_sampler_gives_the_same_std_on_the_mean_and_the_same_event():
    z, c, m, n = 1.3, 0.9, 20.0, 40_000
    params = {"w": torch.zeros(n)}
    ctx = RoundContext(round=0, seed=0, population=200, sampling_rate=0.1, expected_cohort=m, cohort_size=19)
    step = gaussian_noise(z, seed=3, secure_sampler=True)
    state = step.init(params)
    result = step.update(params, state, ctx=ctx, clip_norm=c)
    expected = z * c / m
    # relative standard error of the sample std 1/sqrt(2n) = 0.35%: 2% is 5.7 of them
    assert abs(result.updates["w"].double().std().item() / expected - 1) < 0.02
    assert result.metrics["noise_std"] == pytest.approx(expected)
    assert result.events == (dp_accounting.GaussianDpEvent(z),) == step.releases(0).events
    assert torch.equal(result.state["rng"], state["rng"])  # the seeded generator is not used
