"""The tree-aggregated noise of DP-FTRL (fedpub/steps/tree_noise.py): the binary mechanism's node and increment
noise measured over many seeds, prefix sums against an independent dyadic decomposition, the restart, the
size of the state, the declared event, and what it refuses."""

from __future__ import annotations

import io
import math

import dp_accounting
import pytest
import torch

from fedpub.seeding import torch_generator
from fedpub.steps.gaussian_noise import standard_normal
from fedpub.steps.tree_noise import trailing_zeros, tree_noise
from fedpub.types import RoundContext

Z, C, M = 1.5, 0.8, 20.0
SIGMA = Z * C / M  # a node's std on the mean


def _ctx(t: int) -> RoundContext:
    return RoundContext(round=t, seed=0, population=100, sampling_rate=0.2, expected_cohort=M, cohort_size=20)


def _released(step, means, rounds):
    """Each round's released increment and the state after it, the rounds run in order from ``init``."""
    state = step.init(means[0])
    out = []
    for t in range(rounds):
        result = step.update(means[t], state, ctx=_ctx(t), clip_norm=C)
        state = result.state
        out.append((result, state))
    return out


def test_node_increment_and_prefix_noise_have_the_binary_mechanisms_std_over_many_seeds():
    """Over 40 seeds × 5,000 coordinates (200,000 draws a statistic, so a sample std within 0.3% of the truth
    with overwhelming probability): the node drawn at leaf i has std σ = z·C/m, the increment released at
    leaf i has σ·sqrt(1 + tz(i)) (the new node minus the tz(i) nodes it replaces), and the prefix noise after
    leaf i (the sum of released increments) has σ·sqrt(popcount(i)); increments 1 and 2 are correlated −1/√2."""
    leaves, d = 12, 5_000
    zeros = {"w": torch.zeros(d, dtype=torch.float64)}
    nodes, increments = [[] for _ in range(leaves)], [[] for _ in range(leaves)]
    for seed in range(40):
        for i, (result, state) in enumerate(_released(tree_noise(Z, seed, rounds_per_tree=leaves, rounds=leaves),
                                                      [zeros] * leaves, leaves)):
            nodes[i].append(state["nodes"][-1]["w"])
            increments[i].append(result.updates["w"])
    for i in range(leaves):
        leaf = i + 1
        node, increment = torch.cat(nodes[i]), torch.cat(increments[i])
        prefix = torch.cat([sum(increments[j][s] for j in range(leaf)) for s in range(40)])
        assert node.std().item() == pytest.approx(SIGMA, rel=0.01), leaf
        assert increment.std().item() == pytest.approx(SIGMA * math.sqrt(1 + trailing_zeros(leaf)), rel=0.01), leaf
        assert prefix.std().item() == pytest.approx(SIGMA * math.sqrt(bin(leaf).count("1")), rel=0.01), leaf
    first, second = torch.cat(increments[0]), torch.cat(increments[1])
    assert torch.corrcoef(torch.stack([first, second]))[0, 1].item() == pytest.approx(-(0.5**0.5), abs=0.01)


def _reference_prefix_noise(seed: int, shape, leaves: int, sigma: float) -> list[torch.Tensor]:
    """The prefix noise after each leaf, rebuilt from the dyadic decomposition of [1, i]: the node ending at
    leaf e (created at leaf e, drawn in that order from the step's generator) covers [e − 2^tz(e) + 1, e], and
    [1, i] is the nodes ending at i with its lower bits cleared, one per set bit of i."""
    gen = torch_generator(seed, "tree_noise")
    node_ending_at = {}
    for e in range(1, leaves + 1):
        node_ending_at[e] = standard_normal(shape, torch.float64, torch.device("cpu"), gen) * sigma
    prefixes = []
    for i in range(1, leaves + 1):
        ends = [(i >> b) << b for b in range(i.bit_length()) if i >> b & 1]
        prefixes.append(sum(node_ending_at[e] for e in ends))
    return prefixes


def test_the_released_increments_sum_to_the_means_plus_the_trees_prefix_noise():
    leaves = 13
    g = torch.Generator().manual_seed(0)
    means = [{"w": torch.randn(7, dtype=torch.float64, generator=g)} for _ in range(leaves)]
    released = _released(tree_noise(Z, 5, rounds_per_tree=leaves, rounds=leaves), means, leaves)
    reference = _reference_prefix_noise(5, (7,), leaves, SIGMA)
    total_mean = torch.zeros(7, dtype=torch.float64)
    total_released = torch.zeros(7, dtype=torch.float64)
    for i, (result, state) in enumerate(released):
        total_mean += means[i]["w"]
        total_released += result.updates["w"]
        torch.testing.assert_close(total_released, total_mean + reference[i], rtol=0, atol=1e-12)
        torch.testing.assert_close(sum(n["w"] for n in state["nodes"]), reference[i], rtol=0, atol=1e-12)


def test_the_tree_restarts_each_epoch_and_declares_each_tree_when_it_starts():
    """Trees of 5 rounds over 12 rounds: trees start at rounds 0, 5 and 10 (the last of 2 leaves), each the only
    event of its first round, as declared; after a restart only the new tree's noise is live."""
    rounds, per_tree = 12, 5
    step = tree_noise(Z, 2, rounds_per_tree=per_tree, rounds=rounds)
    zeros = {"w": torch.zeros(3, dtype=torch.float64)}
    released = _released(step, [zeros] * rounds, rounds)
    tree = dp_accounting.SingleEpochTreeAggregationDpEvent
    expected = {0: (tree(Z, 5),), 5: (tree(Z, 5),), 10: (tree(Z, 2),)}
    for t, (result, state) in enumerate(released):
        assert result.events == expected.get(t, ()) == step.releases(t).events
        leaf = t % per_tree + 1
        assert result.metrics["tree_leaf"] == leaf and len(state["nodes"]) == bin(leaf).count("1")
    # the second tree's released increments sum to its own prefix noise: its nodes only
    second_tree = sum(r.updates["w"] for r, _ in released[5:10])
    torch.testing.assert_close(second_tree, sum(n["w"] for n in released[9][1]["nodes"]), rtol=0, atol=1e-12)
    assert len(released[5][1]["nodes"]) == 1


def test_the_state_holds_at_most_log2_t_plus_one_model_sized_tensors():
    rounds = 100
    zeros = {"w": torch.zeros(2)}
    live = [len(state["nodes"]) for _, state in _released(tree_noise(Z, 0, rounds_per_tree=rounds, rounds=rounds),
                                                         [zeros] * rounds, rounds)]
    assert max(live) == 6 <= math.ceil(math.log2(rounds)) + 1  # leaf 63 = 0b111111
    assert live == [bin(i).count("1") for i in range(1, rounds + 1)]


def test_a_checkpointed_state_resumes_the_tree_exactly():
    rounds = 9
    g = torch.Generator().manual_seed(1)
    means = [{"w": torch.randn(4, generator=g)} for _ in range(rounds)]
    step = tree_noise(Z, 4, rounds_per_tree=rounds, rounds=rounds)
    whole = _released(step, means, rounds)
    buffer = io.BytesIO()
    torch.save(whole[5][1], buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    for t in range(6, rounds):
        result = step.update(means[t], state, ctx=_ctx(t), clip_norm=C)
        state = result.state
        assert torch.equal(result.updates["w"], whole[t][0].updates["w"])


def test_zero_noise_releases_the_mean(params):
    step = tree_noise(0.0, 1, rounds_per_tree=4, rounds=4)
    state = step.init(params)
    for t in range(4):
        result = step.update(params, state, ctx=_ctx(t), clip_norm=math.inf)
        state = result.state
        for k in params:
            assert torch.equal(result.updates[k], params[k])


def test_what_the_tree_refuses(params):
    step = tree_noise(Z, 1, rounds_per_tree=4, rounds=6)
    state = step.init(params)
    with pytest.raises(ValueError, match="one z"):
        step.update(params, state, ctx=_ctx(0), clip_norm=C, noise_multiplier=0.5)
    with pytest.raises(ValueError, match="one z"):
        step.releases(0, noise_multiplier=0.5)
    with pytest.raises(ValueError, match="rounds must come in order"):
        step.update(params, state, ctx=_ctx(1), clip_norm=C)
    with pytest.raises(ValueError, match="round 6 is outside the 6 rounds"):
        step.releases(6)
    with pytest.raises(ValueError, match="finite clip_norm"):
        step.update(params, state, ctx=_ctx(0), clip_norm=math.inf)
    with pytest.raises(ValueError, match="noise_multiplier"):
        tree_noise(math.inf, 1, rounds_per_tree=4, rounds=6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_tree_for_a_model_on_the_gpu_is_drawn_there_and_reproduced_by_the_seed():
    leaves, d = 8, 400_000
    zeros = {"w": torch.zeros(d, device="cuda")}
    first = _released(tree_noise(Z, 3, rounds_per_tree=leaves, rounds=leaves), [zeros] * leaves, leaves)
    again = _released(tree_noise(Z, 3, rounds_per_tree=leaves, rounds=leaves), [zeros] * leaves, leaves)
    for (a, state), (b, _) in zip(first, again, strict=True):
        assert a.updates["w"].device.type == "cuda" and torch.equal(a.updates["w"], b.updates["w"])
        assert all(n["w"].device.type == "cuda" for n in state["nodes"])
    last = first[-1][0].updates["w"].double()  # leaf 8: the root's node minus the three it replaces
    assert last.std().item() == pytest.approx(SIGMA * 2, rel=0.01)
