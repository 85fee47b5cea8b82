import math

import pytest
import torch

from fedpub import tree
from fedpub.models.stackoverflow import TagLogisticRegression
from fedpub.steps.precondition import current_preconditioner, precondition, token_frequency_preconditioner
from tests.steps.cohorts import cohort


def _public(params, seed: int, rows: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(rows, *v.shape, generator=g) for k, v in params.items()}


def test_static_ones_leave_the_updates_exactly_unchanged(params, stacked, ctx):
    """AdaDPS with A = 1 is DP-FedAvg exactly."""
    public_mean = {k: v[0] for k, v in _public(params, 4).items()}
    step = precondition("server", static=tree.map_tree(torch.ones_like, params))
    result = step.update(cohort(stacked), step.init(params), ctx=ctx, public_mean=public_mean)
    assert all(torch.equal(v, stacked[k]) for k, v in result.updates.stacked().items())
    assert all(torch.equal(result.outputs["public_mean"][k], public_mean[k]) for k in params)


def test_rmsprop_statistics_with_bias_correction_over_two_rounds(params, stacked, ctx):
    beta, eps = 0.8, 1e-3
    first, second = _public(params, 1), _public(params, 2, rows=2)
    step = precondition("server", beta=beta, eps=eps)
    state = step.init(params)
    assert current_preconditioner(state) is None
    r1 = step.update(cohort(stacked), state, ctx=ctx, public_updates=cohort(first))
    r2 = step.update(cohort(stacked), r1.state, ctx=ctx, public_updates=cohort(second))
    v1 = {k: (1 - beta) * first[k].pow(2).mean(0) for k in params}
    v2 = {k: beta * v1[k] + (1 - beta) * second[k].pow(2).mean(0) for k in params}
    raw1 = {k: torch.sqrt(v1[k] / (1 - beta)) + eps for k in params}  # the first round's: mean |Δ|² root
    raw2 = {k: torch.sqrt(v2[k] / (1 - beta**2)) + eps for k in params}
    mean1, mean2 = (torch.cat([r.flatten() for r in raw.values()]).mean() for raw in (raw1, raw2))
    for k in params:
        a1, a2 = raw1[k] / mean1, raw2[k] / mean2  # scaled to mean 1
        torch.testing.assert_close(r1.updates.stacked()[k], stacked[k] / a1)
        torch.testing.assert_close(r2.updates.stacked()[k], stacked[k] / a2)
        torch.testing.assert_close(current_preconditioner(r2.state)[k], a2)
    assert r2.metrics["public_updates"] == 2.0
    assert r2.metrics["preconditioner_min"] <= r2.metrics["preconditioner_mean"] <= r2.metrics["preconditioner_max"]


def test_the_papers_rmsprop_statistic_is_the_square_of_the_public_mean_update(params, stacked, ctx):
    """``statistic="rmsprop"`` (Li et al. 2023, Alg. 1): v averages (mean_pub Δ)², the public minibatch-mean
    pseudo-gradient squared, not the users' mean of Δ²."""
    beta, eps = 0.5, 1e-3
    first, second = _public(params, 1), _public(params, 2, rows=2)
    step = precondition("client", beta=beta, eps=eps, statistic="rmsprop")
    r1 = step.update(cohort(stacked), step.init(params), ctx=ctx, public_updates=cohort(first))
    r2 = step.update(cohort(stacked), r1.state, ctx=ctx, public_updates=cohort(second))
    v2 = {k: beta * (1 - beta) * first[k].mean(0).pow(2) + (1 - beta) * second[k].mean(0).pow(2) for k in params}
    raw = {k: torch.sqrt(v2[k] / (1 - beta**2)) + eps for k in params}
    mean = torch.cat([r.flatten() for r in raw.values()]).mean()
    for k in params:
        torch.testing.assert_close(current_preconditioner(r2.state)[k], raw[k] / mean)
        assert torch.equal(r2.updates.stacked()[k], stacked[k])  # client placement: the updates pass unchanged
    other = precondition("client", beta=beta, eps=eps).update(cohort(stacked), step.init(params), ctx=ctx,
                                                               public_updates=cohort(first))
    assert not torch.allclose(other.state["v"][next(iter(params))], r1.state["v"][next(iter(params))])
    with pytest.raises(ValueError, match="statistic"):
        precondition("client", statistic="adam")


def test_without_public_updates_nothing_is_learned_and_a_is_one(params, stacked, ctx):
    step = precondition("server")
    empty = cohort({k: torch.zeros(0, *v.shape) for k, v in params.items()})
    for public in (None, empty):
        result = step.update(cohort(stacked), step.init(params), ctx=ctx, public_updates=public)
        assert all(torch.equal(v, stacked[k]) for k, v in result.updates.stacked().items())
        assert result.state["count"] == 0 and current_preconditioner(result.state) is None
        assert result.metrics["preconditioner_max"] == 1.0 and result.metrics["public_updates"] == 0.0


def test_server_placement_divides_the_public_mean_too(params, stacked, ctx):
    static = {k: torch.full_like(v, 4.0) for k, v in params.items()}
    public_mean = {k: torch.ones_like(v) for k, v in params.items()}
    step = precondition("server", static=static)
    result = step.update(cohort(stacked), step.init(params), ctx=ctx, public_mean=public_mean)
    for k in params:
        torch.testing.assert_close(result.outputs["public_mean"][k], torch.full_like(params[k], 0.25))
        torch.testing.assert_close(result.updates.stacked()[k], stacked[k] / 4.0)
        assert torch.equal(result.outputs["preconditioner"][k], static[k])


def test_client_placement_passes_the_updates_through_and_tracks_a(params, stacked, ctx):
    public, public_mean = _public(params, 3), {k: torch.ones_like(v) for k, v in params.items()}
    step = precondition("client", beta=0.5)
    result = step.update(cohort(stacked), step.init(params), ctx=ctx, public_updates=cohort(public),
                         public_mean=public_mean)
    assert all(torch.equal(v, stacked[k]) for k, v in result.updates.stacked().items())
    assert "public_mean" not in result.outputs
    raw = {k: public[k].pow(2).mean(0).sqrt() + 1e-3 for k in params}
    mean = torch.cat([r.flatten() for r in raw.values()]).mean()
    for k in params:
        expected = raw[k] / mean
        torch.testing.assert_close(current_preconditioner(result.state)[k], expected)
        torch.testing.assert_close(result.outputs["preconditioner"][k], expected)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_invalid_static_preconditioner_is_refused(params, bad):
    static = {k: torch.ones_like(v) for k, v in params.items()}
    static["b"][1] = bad
    with pytest.raises(ValueError, match="'b' must be finite and > 0"):
        precondition("server", static=static)


def test_invalid_arguments_name_the_problem(params):
    with pytest.raises(ValueError, match="placement"):
        precondition("both")
    with pytest.raises(ValueError, match="beta"):
        precondition("server", beta=1.0)
    with pytest.raises(ValueError, match="names and shapes"):
        precondition("server", static={"w": torch.ones(4, 3)}).init(params)


def test_token_frequency_gives_rare_words_larger_steps():
    model = TagLogisticRegression(num_classes=3, vocab_size=4)
    params = {k: v.detach() for k, v in model.named_parameters()}
    a = token_frequency_preconditioner(params, [8, 2, 0, 6], weight_name="0.weight", power=0.5, floor=0.1)
    # mean count 4: (2, 0.5, 0, 1.5)^0.5 floored at 0.1
    column = torch.tensor([2**0.5, 0.5**0.5, 0.1, 1.5**0.5])
    torch.testing.assert_close(a["0.weight"], column.expand(3, 4))
    assert torch.equal(a["0.bias"], torch.ones(3))
    state = precondition("client", static=a).init(params)
    assert all(torch.equal(current_preconditioner(state)[k], a[k]) for k in params)


def test_shuffled_token_frequencies_are_the_same_values_in_a_seeded_order():
    """The control shuffled A: the column values of the unshuffled A, permuted across the vocabulary by a
    permutation its seed draws (the same seed, the same order); the other parameters keep A = 1."""
    params = {"0.weight": torch.zeros(3, 50), "0.bias": torch.zeros(3)}
    counts = [float(c) for c in range(50)]
    plain = token_frequency_preconditioner(params, counts, weight_name="0.weight", power=0.5)
    shuffled = token_frequency_preconditioner(params, counts, weight_name="0.weight", power=0.5, shuffle_seed=7)
    column = shuffled["0.weight"][0]
    assert torch.equal(column.sort().values, plain["0.weight"][0].sort().values)  # the same multiset ...
    assert not torch.equal(column, plain["0.weight"][0])  # ... in another order
    assert torch.equal(shuffled["0.weight"], column.expand(3, 50)) and torch.equal(shuffled["0.bias"], torch.ones(3))
    again = token_frequency_preconditioner(params, counts, weight_name="0.weight", power=0.5, shuffle_seed=7)
    other = token_frequency_preconditioner(params, counts, weight_name="0.weight", power=0.5, shuffle_seed=8)
    assert torch.equal(again["0.weight"], shuffled["0.weight"])
    assert not torch.equal(other["0.weight"], shuffled["0.weight"])


def test_top_k_profile_keeps_the_frequent_words_and_speeds_up_every_other():
    """The paper's own side information: its most frequent words at A = 1, every other word (those that never occur
    too) at 1/rare_scale; the bias keeps 1. Shuffled, the same values land on other occurring words."""
    params = {"0.weight": torch.zeros(2, 6), "0.bias": torch.zeros(2)}
    counts = [5, 40, 0, 9, 40, 1]
    a = token_frequency_preconditioner(params, counts, weight_name="0.weight", profile="top_k", frequent_words=2,
                                       rare_scale=200.0)
    column = torch.tensor([1 / 200, 1.0, 1 / 200, 1 / 200, 1.0, 1 / 200])
    torch.testing.assert_close(a["0.weight"], column.expand(2, 6))
    assert torch.equal(a["0.bias"], torch.ones(2))
    ties = token_frequency_preconditioner(params, counts, weight_name="0.weight", profile="top_k", frequent_words=1)
    assert ties["0.weight"][0].tolist().index(1.0) == 1  # of two equal counts, the first column
    params = {"0.weight": torch.zeros(2, 50), "0.bias": torch.zeros(2)}
    counts = [float(c) for c in range(1, 41)] + [0.0] * 10
    plain, permuted = (token_frequency_preconditioner(params, counts, weight_name="0.weight", profile="top_k",
                                                      frequent_words=5, shuffle_seed=seed) for seed in (None, 3))
    kept = permuted["0.weight"][0] == 1.0
    assert kept.sum() == 5 and not torch.equal(kept, plain["0.weight"][0] == 1.0)
    assert not kept[40:].any()  # a word that never occurs is never among the frequent
    with pytest.raises(ValueError, match="frequent_words 60 exceeds the vocabulary of 50"):
        token_frequency_preconditioner(params, counts, weight_name="0.weight", profile="top_k", frequent_words=60)


def test_token_frequency_checks_the_vocabulary_size():
    params = {"0.weight": torch.zeros(3, 4), "0.bias": torch.zeros(3)}
    with pytest.raises(ValueError, match="5 entries .* vocabulary of 4"):
        token_frequency_preconditioner(params, [1.0] * 5, weight_name="0.weight")
    with pytest.raises(ValueError, match="weight_name"):
        token_frequency_preconditioner(params, [1.0] * 4, weight_name="0.bias")
