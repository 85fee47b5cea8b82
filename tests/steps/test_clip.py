import math

import torch

from fedpub.steps.clip import clip
from tests.steps.cohorts import cohort


def test_rows_above_the_norm_are_scaled_to_it_and_the_rest_kept(params, stacked, ctx):
    small = cohort(stacked).scale(torch.tensor([1e-3, 1, 1, 1, 1]))
    step = clip(2.0)
    result = step.update(small, step.init(params), ctx=ctx)
    norms_in, norms_out = small.norms(), result.updates.norms()
    small_w, clipped_w = small.stacked()["w"], result.updates.stacked()["w"]
    assert norms_in[0] < 2.0 and torch.allclose(norms_out[0], norms_in[0])
    assert torch.allclose(norms_out[1:], torch.full((4,), 2.0, dtype=torch.float64), rtol=1e-5)
    # direction is kept
    cos = (small_w[1] * clipped_w[1]).sum() / (small_w[1].norm() * clipped_w[1].norm())
    assert math.isclose(float(cos), 1.0, rel_tol=1e-5)
    assert result.diagnostics["clipped_fraction"] == 0.8
    assert result.outputs["clip_norm"] == 2.0


def test_infinite_norm_clips_nothing(params, stacked, ctx):
    step = clip(math.inf)
    result = step.update(cohort(stacked), step.init(params), ctx=ctx)
    for k, value in result.updates.stacked().items():
        assert torch.equal(value, stacked[k])
    assert result.diagnostics["clipped_fraction"] == 0.0


def test_zero_update_stays_zero(params, ctx):
    zeros = {k: torch.zeros(2, *v.shape) for k, v in params.items()}
    step = clip(1.0)
    result = step.update(cohort(zeros), step.init(params), ctx=ctx)
    assert all(bool((v == 0).all()) for v in result.updates.stacked().values())
