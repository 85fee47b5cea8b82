"""Tree-aggregated Gaussian noise on the mean update: the binary mechanism of DP-FTRL (Kairouz, McMahan, Song,
Thakkar, Thakurta, Xu 2021, "Practical and Private (Deep) Learning without Sampling or Shuffling", §3, Alg. 1
and App. D; the binary mechanism of Chan, Shi and Song 2011 and Dwork et al. 2010).

Within one tree the rounds are the leaves 1, 2, ..., n. Every node of the binary tree over them (the dyadic
interval [j·2^l + 1, (j+1)·2^l] at level l) gets its own noise N(0, (z·C)²) on the sum (÷ m on the mean, m the
expected cohort). The noise of the prefix 1..i is the sum over the nodes of the dyadic decomposition of [1, i],
one node per set bit of i. Going from i − 1 to i the decomposition loses its nodes below level tz(i) (the
trailing zeros of i) and gains the node of level tz(i) ending at i, so the state only holds the noise of those
live nodes (at most ⌊log2 n⌋ + 1 model-sized tensors) and round i releases

    mean update_i + noise_prefix(i) − noise_prefix(i − 1) = mean update_i + new node − Σ nodes it replaces,

so the released increments sum to the tree-noised prefix sum (FTRL's θ_i = θ_0 − η·(noisy prefix sum of the
updates): a server SGD step of learning rate η on the increments, momentum and Adam being post-processing).
Each user is in at most one leaf of a tree (an epoch of fixed blocks, :class:`~fedpub.privacy.events.EpochBlocks`)
and changes at most ⌈log2(n + 1)⌉ nodes by C each: a tree is ``SingleEpochTreeAggregationDpEvent(z, n)`` under
replace-special neighbours, which dp-accounting's RDP accountant prices (App. D).

The tree restarts every ``rounds_per_tree`` rounds (every epoch): the state is cleared and the model keeps the
last prefix noise, as the paper's restarted DP-FTRL does. The step **declares the whole tree's event on the
tree's first round** (no-op on the others): the tree's price is then paid, and checked against the budget,
before any of its releases — conservative when a run stops inside a tree, never optimistic. The round's C is
the ``clip_norm`` input; one z serves the whole tree, so a ``noise_multiplier`` input (a schedule) is refused.
The randomness is a torch generator whose state is in the step's state (seeded from the run seed, as
:mod:`fedpub.steps.gaussian_noise`), so a checkpoint resumes the tree exactly.
"""

from __future__ import annotations

import math
from typing import TypedDict

import dp_accounting
import torch

from fedpub import tree
from fedpub.seeding import torch_generator
from fedpub.step import Releases, Step, StepResult, after_sum_step
from fedpub.steps.gaussian_noise import check_noise_multiplier, standard_normal
from fedpub.types import Params, RoundContext, Updates


class TreeNoiseState(TypedDict):
    """The noise's generator, the round the tree expects next, and the live nodes' noise (levels descending)."""

    rng: torch.Tensor
    next_round: int
    nodes: list[Updates]


def trailing_zeros(leaf: int) -> int:
    """tz(i): the level of the tree node that ends at leaf ``leaf`` (≥ 1) and joins the prefix's decomposition."""
    return (leaf & -leaf).bit_length() - 1


def _refuse_schedule(noise_multiplier: float | None) -> None:
    if noise_multiplier is not None:
        raise ValueError("tree aggregation noises a whole tree with one z: a noise_multiplier input (a budget or "
                         "public schedule) cannot change it round to round")


def tree_noise(noise_multiplier: float, seed: int, *, rounds_per_tree: int, rounds: int) -> Step:
    """Add the binary mechanism's increment noise to the mean update (node std z·C on the sum, z·C/m on the
    mean), restarting the tree every ``rounds_per_tree`` rounds of the run's ``rounds``."""
    z = noise_multiplier
    check_noise_multiplier(z)
    if rounds_per_tree < 1 or rounds < 1:
        raise ValueError(f"rounds_per_tree and rounds must be >= 1, got {rounds_per_tree} and {rounds}")

    def position(round_index: int) -> int:
        """The round's place in its tree (0: the tree starts)."""
        if not 0 <= round_index < rounds:
            raise ValueError(f"round {round_index} is outside the {rounds} rounds the tree noise was built for")
        return round_index % rounds_per_tree

    def tree_event(round_index: int) -> tuple[dp_accounting.DpEvent, ...]:
        if position(round_index):
            return ()
        leaves = min(rounds_per_tree, rounds - round_index)
        return (dp_accounting.SingleEpochTreeAggregationDpEvent(z, leaves),)

    def init(params: Params) -> TreeNoiseState:
        return TreeNoiseState(rng=torch_generator(seed, "tree_noise").get_state(), next_round=0, nodes=[])

    def update(
        updates: Updates,
        state: TreeNoiseState,
        *,
        ctx: RoundContext,
        clip_norm: float,
        noise_multiplier: float | None = None,
    ) -> StepResult:
        _refuse_schedule(noise_multiplier)
        if z > 0 and math.isinf(clip_norm):
            raise ValueError("noise needs a finite clip_norm: the sensitivity is unbounded")
        t = ctx.round
        pos = position(t)
        if pos and state["next_round"] != t:
            raise ValueError(f"the tree noise is at round {state['next_round']}, not {t}: rounds must come in order")
        nodes = [] if pos == 0 else list(state["nodes"])  # the live nodes, levels descending (i − 1's set bits)
        level = trailing_zeros(pos + 1)
        node_std = (z * clip_norm if z > 0 else 0.0) / ctx.expected_cohort
        gen = torch.Generator()
        gen.set_state(state["rng"])
        new = {k: standard_normal(v.shape, v.dtype, v.device, gen).mul_(node_std) for k, v in updates.items()}
        increment = new
        for _ in range(level):  # the nodes of levels level − 1, ..., 0 leave the decomposition
            increment = tree.sub(increment, nodes.pop())
        noisy = tree.add(updates, increment)
        metrics = {
            "noise_multiplier": z,
            "noise_std": node_std,
            "increment_noise_std": node_std * math.sqrt(1 + level),
            "tree_leaf": float(pos + 1),
            "live_nodes": float(len(nodes) + 1),
        }
        new_state = TreeNoiseState(rng=gen.get_state(), next_round=t + 1, nodes=[*nodes, new])
        return StepResult(noisy, new_state, metrics, tree_event(t))

    def releases(round_index: int, *, noise_multiplier: float | None = None) -> Releases:
        _refuse_schedule(noise_multiplier)
        return Releases(tree_event(round_index))

    return after_sum_step(update, init=init, inputs=("clip_norm",), optional_inputs=("noise_multiplier",),
                          releases=releases)
