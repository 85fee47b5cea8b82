import dataclasses
import math

import pytest
import torch

from fedpub.steps.mirror import mirror, mirror_alpha, quadratic_mirror
from fedpub.types import RoundContext


def _tree(params, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=g) for k, v in params.items()}


def test_the_alpha_schedule_is_a_cosine_decay_to_the_floor():
    assert mirror_alpha(0, 10, 0.0) == 1.0
    assert mirror_alpha(5, 10, 0.0) == pytest.approx(math.cos(math.pi / 4))
    assert mirror_alpha(10, 10, 0.0) == pytest.approx(0.0, abs=1e-15)
    assert mirror_alpha(10, 10, 0.3) == mirror_alpha(500, 10, 0.3) == 0.3  # after K, α stays at the floor
    schedule = [mirror_alpha(t, 10, 0.1) for t in range(30)]
    assert all(a >= b for a, b in zip(schedule, schedule[1:]))


def test_alpha_one_returns_the_private_input_exactly(params, ctx):
    """PDA-DPMD with α = 1 is DP-FedAvg exactly."""
    private, public_mean = _tree(params, 1), _tree(params, 2)
    step = mirror(10)
    for result in (
        step.update(private, step.init(params), ctx=ctx, public_mean=public_mean),  # t = 0
        step.update(private, step.init(params), ctx=dataclasses.replace(ctx, round=7), public_mean=None),
        mirror(10, alpha_floor=1.0).update(private, {}, ctx=dataclasses.replace(ctx, round=7), public_mean=public_mean),
    ):
        assert result.metrics["alpha"] == 1.0
        assert all(torch.equal(result.updates[k], private[k]) for k in params)


def test_mixes_private_and_public_means(params, ctx):
    private, public_mean = _tree(params, 1), _tree(params, 2)
    step = mirror(6, alpha_floor=0.1)
    result = step.update(private, step.init(params), ctx=dataclasses.replace(ctx, round=2), public_mean=public_mean)
    alpha = math.cos(math.pi * 2 / 12)
    assert result.metrics["alpha"] == pytest.approx(alpha)
    for k in params:
        torch.testing.assert_close(result.updates[k], alpha * private[k] + (1 - alpha) * public_mean[k])


def test_without_the_public_term_the_step_is_the_alpha_scaled_private_mean(params, ctx):
    """The control α-damped DP-FedAvg: the same schedule, no public term, with or without a public mean given."""
    private, public_mean = _tree(params, 1), _tree(params, 2)
    step = mirror(6, alpha_floor=0.1, public_term=False)
    for t in (0, 2, 6, 9):
        alpha = mirror_alpha(t, 6, 0.1)
        for given in (public_mean, None):
            result = step.update(private, step.init(params), ctx=dataclasses.replace(ctx, round=t), public_mean=given)
            assert result.metrics["alpha"] == alpha
            for k in params:
                torch.testing.assert_close(result.updates[k], alpha * private[k], rtol=0, atol=0)
    with_public = mirror(6, alpha_floor=0.1).update(private, {}, ctx=dataclasses.replace(ctx, round=2),
                                                    public_mean=public_mean)
    assert not torch.equal(with_public.updates["w"], mirror_alpha(2, 6, 0.1) * private["w"])  # the term is real


@pytest.mark.parametrize(("decay_rounds", "floor"), [(0, 0.0), (5, -0.1), (5, 1.5)])
def test_invalid_schedule_is_refused(decay_rounds, floor):
    with pytest.raises(ValueError, match="decay_rounds >= 1 and 0 <= alpha_floor <= 1"):
        mirror(decay_rounds, floor)


def test_quadratic_mirror_applies_the_inverse_hessian_to_trees_and_rows():
    gen = torch.Generator().manual_seed(0)
    root = torch.randn(5, 5, generator=gen, dtype=torch.float64)
    hessian = root @ root.T + torch.eye(5, dtype=torch.float64)
    inverse = torch.linalg.inv(hessian)
    inverse = (inverse + inverse.T) / 2
    step = quadratic_mirror(inverse)
    ctx = RoundContext(round=0, seed=0, population=10, sampling_rate=0.5, expected_cohort=5.0, cohort_size=5)
    g = torch.randn(5, generator=gen, dtype=torch.float64)
    two = step.update({"a": g[:2].reshape(2, 1), "b": g[2:]}, step.init({}), ctx=ctx).updates
    torch.testing.assert_close(torch.cat([two["a"].reshape(-1), two["b"]]), torch.linalg.solve(hessian, g))
    rows = torch.randn(3, 5, generator=gen, dtype=torch.float64)  # three models at once, one per row
    mapped = step.update({"theta": rows}, step.init({}), ctx=ctx).updates["theta"]
    torch.testing.assert_close(mapped, torch.linalg.solve(hessian, rows.T).T)
    identity = quadratic_mirror(torch.eye(5, dtype=torch.float64))  # P = I: DP-SGD's step
    assert torch.equal(identity.update({"theta": rows}, identity.init({}), ctx=ctx).updates["theta"], rows)
    with pytest.raises(ValueError, match="symmetric"):
        quadratic_mirror(root)
