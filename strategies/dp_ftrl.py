"""DP-FTRL in federated form (Kairouz, McMahan, Song, Thakkar, Thakurta, Xu 2021, "Practical and Private
(Deep) Learning without Sampling or Shuffling", Alg. 1, §4 and App. D): no sampling — each epoch the private
users, shuffled, are dealt into fixed blocks of about m, one block a round (``sampling.kind: epoch_blocks``);
each update is clipped to C, summed and divided by m, and the noise is tree-aggregated (the binary mechanism,
:mod:`fedpub.steps.tree_noise`): the released increments sum to the prefix sum of the mean updates plus the
tree's noise, restarted every epoch. The server optimizer then steps on the increments (SGD: FTRL with a
restart each epoch; momentum: the paper's DP-FTRLM). A tree is ``SingleEpochTreeAggregationDpEvent(z, k)``
under replace-special neighbours, which only the RDP accountant prices (``privacy.accountant: rdp``; PLD is
refused when the strategy is built). Public-user recentering composes: recenter → clip → aggregate → tree
noise → add the center (DOPE's center is public, outside the noisy sum).
"""

from __future__ import annotations

from fedpub.privacy.events import EpochBlocks
from fedpub.step import Step
from fedpub.steps.tree_noise import tree_noise
from fedpub.strategies.build_context import BuildContext


def tree_noise_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """The noise slot of the private mean (after clip → aggregate ÷ m): tree noise, the tree restarting every epoch
    of the sampling's blocks. The tree has no secure sampler: its release adds stored node noise to the mean in
    float arithmetic, the very thing the secure sampler avoids, so ``secure_sampler`` is refused
    (docs/privacy.md)."""
    if ctx.secure_sampler:
        raise ValueError("privacy.noise_sampler `opendp` does not cover strategy.tree_aggregation: DP-FTRL's release "
                         "adds stored tree noise to the mean in floating point; use privacy.noise_sampler: torch")
    sampling = ctx.sampling
    if not isinstance(sampling, EpochBlocks):
        raise ValueError(f"strategy.tree_aggregation needs each user at most once per tree: strategy.sampling.kind "
                         f"must be epoch_blocks, got {type(sampling).__name__}")
    noise = tree_noise(ctx.noise_multiplier, ctx.seed, rounds_per_tree=sampling.rounds_per_epoch, rounds=ctx.rounds)
    return [("noise", noise)]
