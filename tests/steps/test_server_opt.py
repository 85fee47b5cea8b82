import torch

from fedpub.steps.server_opt import server_adam, server_sgd


def test_plain_sgd_with_lr_one_applies_the_average(params, ctx):
    delta = {k: torch.randn(v.shape, generator=torch.Generator().manual_seed(2)) for k, v in params.items()}
    step = server_sgd(1.0)
    result = step.update(delta, step.init(params), ctx=ctx)
    for k in params:
        assert torch.equal(result.updates[k], delta[k])


def test_momentum_accumulates(params, ctx):
    delta = {k: torch.ones_like(v) for k, v in params.items()}
    step = server_sgd(0.1, momentum=0.5)
    first = step.update(delta, step.init(params), ctx=ctx)
    second = step.update(delta, first.state, ctx=ctx)
    torch.testing.assert_close(first.updates["w"], 0.1 * torch.ones(4, 3))
    torch.testing.assert_close(second.updates["w"], 0.1 * 1.5 * torch.ones(4, 3))


def test_adam_first_step_moves_each_coordinate_by_about_lr_towards_the_update(params, ctx):
    delta = {k: torch.full_like(v, 2.0) for k, v in params.items()}
    step = server_adam(0.01, eps=1e-8)
    result = step.update(delta, step.init(params), ctx=ctx)
    torch.testing.assert_close(result.updates["w"], torch.full((4, 3), 0.01))
