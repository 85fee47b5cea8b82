import dataclasses
import math

import dp_accounting
import pytest

from fedpub.step import named_chain
from fedpub.steps.aggregate import aggregate
from fedpub.steps.budget_schedule import budget_schedule
from fedpub.steps.clip import clip
from fedpub.steps.gaussian_noise import gaussian_noise
from tests.steps.cohorts import cohort


def test_only_the_boosted_rounds_hand_the_noise_their_multiplier(params, stacked, ctx):
    step = budget_schedule(range(3, 5), 0.4)
    updates = cohort(stacked)
    for t in range(7):
        result = step.update(updates, step.init(params), ctx=dataclasses.replace(ctx, round=t))
        boosted = t in (3, 4)
        assert result.outputs == ({"noise_multiplier": 0.4} if boosted else {})
        assert result.metrics == {"boosted": float(boosted)}
        assert result.updates is updates and result.events == ()


def test_the_noise_of_a_boosted_round_uses_and_accounts_the_boosted_z(params, stacked, ctx):
    z, boosted_z, c = 1.5, 0.6, 1.0
    step = named_chain(("budget_schedule", budget_schedule(range(1), boosted_z)), ("clip", clip(c)),
                       ("aggregate", aggregate()), ("noise", gaussian_noise(z, seed=0)))
    state = step.init(params)
    for t, expected in ((0, boosted_z), (1, z)):
        result = step.update(cohort(stacked), state, ctx=dataclasses.replace(ctx, round=t))
        assert result.events == (dp_accounting.GaussianDpEvent(expected),)
        assert result.metrics["noise/noise_std"] == pytest.approx(expected * c / ctx.expected_cohort)
        state = result.state


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan])
def test_a_boosted_noise_multiplier_that_is_not_positive_is_refused(bad):
    with pytest.raises(ValueError, match="boosted_noise_multiplier must be > 0"):
        budget_schedule(range(2), bad)
