"""Seed 001 (Ganesh et al. 2023, "Why is public pretraining necessary for private model training?") Figure 4 in
federated form: a fixed budget of T_pub epochs on the public data, t of them spent pre-training (before the
private rounds: fedpub's ``warm_start``) and T_pub − t post-training (after them: ``model_reuse`` with λ = 0,
plain fine-tuning of the private model on the public data), at the same user-level ε.
``python -m fedpub.simulations.reproductions.public_epochs_figure4 [--quick] [--seeds 10] [--out DIR]``.

The paper (CIFAR-10, 2,000 in-distribution public images, T_pub = 200; CINIC-10 out-of-distribution, T_pub = 30)
finds test accuracy highest when every public epoch is spent pre-training, rising with t and flattening after
t ≈ 100: the first rounds of private training are the most sensitive to noise.

**The regime** (fedpub issue 36). At the earlier size (the small CNN on 1,000 writers, 5 % of them public, 30
rounds) every arm sat at chance or below public-only: nothing could be decided. The runs are now at the gate size
of :data:`~.federated.GATE_SIZE_EMNIST` (the softmax ``emnist_softmax``, d = 7,850; 5,000 private writers, 500
users expected a round) with 100 **off-distribution public writers** (``data.synthetic.public``, the CINIC-10 arm's
situation; data in ``data/synthetic_emnist_5000_public``, generated on first use): with 2 % in-distribution public
writers the public-only control beat DP-FedAvg in the gate probe, and no split of public epochs could then be told
apart from not training privately at all. 60 private rounds (the gate size's 150 cost 2.5×), ε = 2 (where the
probe passed). T_pub = 40 public epochs at lr 0.01, batch 16, for every arm, t ∈ {0, 20, 40}: the public-only
probe on this data (validation accuracy, tuning seed 100) gave 0.40 / 0.63 / 0.68 after 5 / 20 / 60 epochs at lr
0.003, 0.37 / 0.65 / 0.68 at 0.01 and 0.20 / 0.49 / 0.60 at 0.03, so 40 epochs at 0.01 trains the public data
nearly to its plateau and the split still matters. Each arm tunes the client lr × server lr grid
(:data:`~.federated.GATE_SIZE_RATES`, extended once: 9 points) on validation users (10 % of the private users held
out of N), each point the mean of two tuning seeds, by the one runner,
:mod:`fedpub.simulations.reproductions.federated`; then 10 test seeds (``--seeds 10``; 3 left every claim
inconclusive), paired. A cell is testable only where an arm beats the public-only control (:mod:`.public_only`, its
lr and epochs tuned) by a point, no arm sits at chance and no tuning landscape is flat. Every arm is evaluated on
every test client (``eval_users: all``; fedpub's default for runs with public users, the public users' test
examples, would favour post-training, which fits the public users last).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedpub.simulations.tools.compare import deep_merge
from fedpub.simulations.reproductions.federated import GATE_SIZE_60_ROUNDS, GATE_SIZE_RATES, QUICK_EMNIST, TUNING_SEEDS
from fedpub.simulations.reproductions.federated import FederatedReproduction, emnist_gates, run
from fedpub.simulations.reproductions.judge import Claim
from fedpub.simulations.reproductions.public_only import public_only_control

ARMS = ("pre_40_post_0", "pre_20_post_20", "pre_0_post_40")
PUBLIC_WRITERS = {"synthetic": {"public": {"num_writers": 100}}, "public": {"pool": "heldout", "fraction": 0.0}}
"""100 public writers of the synthetic generator's distinct public spec (off-distribution), none of the private."""
REGIME: dict[str, Any] = deep_merge(GATE_SIZE_60_ROUNDS, {
    "data": {"path": "data/synthetic_emnist_5000_public", **PUBLIC_WRITERS},
})
"""The gate size with off-distribution public writers and the sweep's 60 rounds (the module docstring)."""

REPRODUCTION = FederatedReproduction(
    name="public_epochs_figure4",
    seed_paper="001",
    title="Seed 001, Figure 4 (public epochs split between pre- and post-training)",
    paper=("Ganesh et al. 2023, \"Why is public pretraining necessary for private model training?\", Figure 4 "
           "(CIFAR-10 with 2,000 public images, T_pub = 200 public epochs, t of them before private training)."),
    sweep=Path(__file__).with_suffix(".yaml"),
    claims=(
        Claim("all public epochs as pre-training beat all as post-training", "pre_40_post_0", "pre_0_post_40",
              "Figure 4 (left, plotted): accuracy rises with the pre-training share t; t = T_pub is the best"),
        Claim("all public epochs as pre-training beat an even split", "pre_40_post_0", "pre_20_post_20",
              "Figure 4: the benefit of longer pre-training is small after t = 100 of 200"),
        Claim("an even split beats all public epochs as post-training", "pre_20_post_20", "pre_0_post_40",
              "Figure 4: accuracy increases with t"),
    ),
    axes={label: GATE_SIZE_RATES for label in ARMS},
    changes=REGIME,
    gates=emnist_gates(ARMS, private=ARMS),
    tuning_seeds=TUNING_SEEDS,
    max_extensions=1,
    quick=deep_merge(QUICK_EMNIST, {"data": {"synthetic": {"public": {"num_writers": 8}}}}),
    control=public_only_control,
)


def main(argv: Sequence[str] | None = None) -> Path:
    return run(REPRODUCTION, argv)


if __name__ == "__main__":
    main()
