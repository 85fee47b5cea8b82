import importlib.util
import math

import dp_accounting
import pytest
import torch

from fedpub.cohort_updates import Cohort
from fedpub.steps.adaptive_clip import adaptive_clip
from fedpub.types import RoundContext
from tests.steps.cohorts import cohort

CTX = RoundContext(round=0, seed=0, population=50, sampling_rate=0.1, expected_cohort=5.0, cohort_size=5)


def _rows(norm: float, rows: int = 5) -> Cohort:
    """``rows`` updates of exactly L2 norm ``norm``."""
    w = torch.zeros(rows, 4)
    w[:, 0] = norm
    return cohort({"w": w})


def test_when_every_update_is_clipped_the_norm_grows_in_closed_form():
    step = adaptive_clip(1.0, target_quantile=0.5, learning_rate=0.2, count_noise_std=0.0, seed=0)
    result = step.update(_rows(10.0), step.init({}), ctx=CTX)
    # b̃ = 0 unclipped users: C_{t+1} = C · exp(η γ)
    assert result.state["clip_norm"] == pytest.approx(math.exp(0.2 * 0.5))
    assert result.diagnostics["clipped_fraction"] == 1.0


def test_when_no_update_is_clipped_the_norm_shrinks_in_closed_form():
    step = adaptive_clip(1.0, target_quantile=0.5, learning_rate=0.2, count_noise_std=0.0, seed=0)
    result = step.update(_rows(0.001), step.init({}), ctx=CTX)
    # b̃ = 5 / m = 1: C_{t+1} = C · exp(−η (1 − γ))
    assert result.state["clip_norm"] == pytest.approx(math.exp(-0.2 * 0.5))


def test_the_round_clips_and_noises_with_c_t_not_c_t_plus_1():
    step = adaptive_clip(2.0, 0.5, 0.5, 0.0, seed=0)
    result = step.update(_rows(10.0), step.init({}), ctx=CTX)
    assert result.outputs["clip_norm"] == 2.0 and result.state["clip_norm"] > 2.0
    assert torch.allclose(result.updates.norms(), torch.full((5,), 2.0, dtype=torch.float64))


def _noisy_fractions(step, draws: int = 2000):
    """The noisy unclipped fraction of ``draws`` rounds of 5 unclipped users at C = 1, and the last result."""
    state = step.init({})
    fractions = []
    for _ in range(draws):
        result = step.update(_rows(0.5), state, ctx=CTX)
        state = {**result.state, "clip_norm": 1.0}  # keep C fixed to sample the noisy count
        fractions.append(result.metrics["noisy_unclipped_fraction"])
    return torch.tensor(fractions, dtype=torch.float64), result


def test_the_noisy_count_is_a_gaussian_release_with_sensitivity_one():
    measured, result = _noisy_fractions(adaptive_clip(1.0, 0.5, 0.2, count_noise_std=4.0, seed=7))
    assert measured.mean().item() == pytest.approx(1.0, abs=0.05)  # 5 unclipped / m = 5
    assert measured.std().item() == pytest.approx(4.0 / 5.0, rel=0.05)
    assert result.events == (dp_accounting.GaussianDpEvent(4.0),)


@pytest.mark.skipif(importlib.util.find_spec("opendp") is None, reason="OpenDP (the secure-noise extra) is missing")
def test_the_secure_sampler_noises_the_count_alike():
    measured, result = _noisy_fractions(adaptive_clip(1.0, 0.5, 0.2, count_noise_std=4.0, seed=7, secure_sampler=True))
    # unseeded: bounds of about 5.6 and 6.3 standard errors (0.8/sqrt(2000) on the mean, 1/sqrt(4000) on the std)
    assert measured.mean().item() == pytest.approx(1.0, abs=0.1)
    assert measured.std().item() == pytest.approx(4.0 / 5.0, rel=0.1)
    assert result.events == (dp_accounting.GaussianDpEvent(4.0),)
