import math

import torch

from fedpub import tree
from fedpub.steps.recenter import add_center, recenter
from tests.steps.cohorts import cohort
from tests.steps.step_contract import assert_step_contract


def test_contract(params, stacked, ctx):
    public_mean = {k: torch.ones_like(v) for k, v in params.items()}
    shapes = {k: v.shape for k, v in stacked.items()}
    assert_step_contract(lambda: recenter(0.5), params, cohort(stacked), ctx, shapes, public_mean=public_mean)
    assert_step_contract(add_center, params, params, ctx, {k: v.shape for k, v in params.items()}, center=public_mean)


def test_the_center_is_the_public_mean_clipped_to_lambda(params, stacked, ctx):
    public_mean = {k: 3 * torch.ones_like(v) for k, v in params.items()}
    step = recenter(center_clip=1.0)
    result = step.update(cohort(stacked), step.init(params), ctx=ctx, public_mean=public_mean)
    center = result.outputs["center"]
    assert math.isclose(float(tree.global_norm(center)), 1.0, rel_tol=1e-6)
    for k, value in result.updates.stacked().items():
        torch.testing.assert_close(value, stacked[k] - center[k])


def test_without_public_updates_the_center_is_zero(params, stacked, ctx):
    step = recenter()
    result = step.update(cohort(stacked), step.init(params), ctx=ctx)
    assert all(torch.equal(v, stacked[k]) for k, v in result.updates.stacked().items())
    assert float(tree.global_norm(result.outputs["center"])) == 0.0
