import torch

from fedpub import tree
from fedpub.steps.aggregate import aggregate
from fedpub.types import RoundContext
from tests.steps.cohorts import cohort


def test_divides_the_sum_by_the_expected_cohort_not_the_number_of_replies(params, stacked):
    ctx = RoundContext(round=0, seed=0, population=100, sampling_rate=0.08, expected_cohort=8.0, cohort_size=5)
    step = aggregate()
    result = step.update(cohort(stacked), step.init(params), ctx=ctx)
    for k in stacked:
        torch.testing.assert_close(result.updates[k], stacked[k].sum(0) / 8.0)


def test_empty_cohort_gives_zero(params, ctx):
    empty = {k: torch.zeros(0, *v.shape) for k, v in params.items()}
    step = aggregate()
    result = step.update(cohort(empty), step.init(params), ctx=ctx)
    assert float(tree.global_norm(result.updates)) == 0.0
