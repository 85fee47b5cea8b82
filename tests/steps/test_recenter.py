import dataclasses
import math

import torch

from fedpub import tree
from fedpub.steps.recenter import add_center, recenter
from tests.steps.cohorts import cohort


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


def test_add_center_adds_the_center_back_and_extended_averages_the_public_mean_in(params, ctx):
    mean, center, public_mean = ({k: torch.full_like(v, x) for k, v in params.items()} for x in (0.5, 2.0, 4.0))
    plain = add_center().update(mean, {}, ctx=ctx, center=center, public_mean=public_mean)
    assert all(torch.equal(v, torch.full_like(v, 2.5)) for v in plain.updates.values())
    extended = add_center(extended=True)
    with_public = dataclasses.replace(ctx, num_public=5)  # m = 5 private expected, k = 5 public
    result = extended.update(mean, {}, ctx=with_public, center=center, public_mean=public_mean)
    assert all(torch.equal(v, torch.full_like(v, (2.5 * 5 + 4.0 * 5) / 10)) for v in result.updates.values())
    unused = extended.update(mean, {}, ctx=ctx, center=center, public_mean=public_mean)  # no public user this round
    assert all(torch.equal(v, torch.full_like(v, 2.5)) for v in unused.updates.values())


def test_without_subtracting_the_updates_are_clipped_around_zero_and_the_center_still_goes_on(params, stacked, ctx):
    """The control that removes recentering alone: the updates pass unchanged, the same c_t is handed to add_center."""
    public_mean = {k: 3 * torch.ones_like(v) for k, v in params.items()}
    kept = recenter(center_clip=1.0, subtract=False)
    result = kept.update(cohort(stacked), kept.init(params), ctx=ctx, public_mean=public_mean)
    assert all(torch.equal(v, stacked[k]) for k, v in result.updates.stacked().items())
    dope = recenter(center_clip=1.0)
    center = dope.update(cohort(stacked), dope.init(params), ctx=ctx, public_mean=public_mean).outputs["center"]
    assert all(torch.equal(result.outputs["center"][k], center[k]) for k in center)
