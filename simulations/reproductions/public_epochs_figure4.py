"""Seed 001 (Ganesh et al. 2023, "Why is public pretraining necessary for private model training?") Figure 4 in
federated form: a fixed budget of T_pub epochs on the public data, t of them spent pre-training (before the
private rounds: fedpub's ``warm_start``) and T_pub − t post-training (after them: ``model_reuse`` with λ = 0,
plain fine-tuning of the private model on the public data), at the same user-level ε.
``python -m fedpub.simulations.reproductions.public_epochs_figure4 [--quick] [--out DIR]``.

The paper (CIFAR-10, 2,000 in-distribution public images, T_pub = 200; CINIC-10 out-of-distribution, T_pub = 30)
finds test accuracy highest when every public epoch is spent pre-training, rising with t and flattening after
t ≈ 100: the first rounds of private training are the most sensitive to noise. Here: the offline EMNIST-layout
data with 5% of the writers public (in distribution), T_pub = 6, t ∈ {0, 3, 6}, ε ∈ {1, 4}; the private rounds
are those of ``public_emnist.yaml`` (30 rounds), each arm's client and server learning rates tuned on validation
users (10 % of the private users held out of N) at every ε, two seeds a point, by the one runner,
:mod:`fedpub.simulations.reproductions.federated`; a cell is testable only where an arm beats the public-only
control (:mod:`.public_only`) by a point, no arm sits at chance and no tuning landscape is flat;
the public-training setting (batch 16, lr 0.05) is the same for the three arms. Every arm is evaluated on every
test client (``eval_users: all``; fedpub's default for runs with public users, the public users' test examples,
would favour post-training, which fits the public users last).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fedpub.simulations.reproductions.federated import CLIENT_LR, EVALUATION, SERVER_LR, TUNING_SEEDS, run
from fedpub.simulations.reproductions.federated import FederatedReproduction, emnist_gates
from fedpub.simulations.reproductions.judge import Claim
from fedpub.simulations.reproductions.public_only import public_only_control

ARMS = ("pre_6_post_0", "pre_3_post_3", "pre_0_post_6")

REPRODUCTION = FederatedReproduction(
    name="public_epochs_figure4",
    seed_paper="001",
    title="Seed 001, Figure 4 (public epochs split between pre- and post-training)",
    paper=("Ganesh et al. 2023, \"Why is public pretraining necessary for private model training?\", Figure 4 "
           "(CIFAR-10 with 2,000 public images, T_pub = 200 public epochs, t of them before private training)."),
    sweep=Path(__file__).with_suffix(".yaml"),
    claims=(
        Claim("all public epochs as pre-training beat all as post-training", "pre_6_post_0", "pre_0_post_6",
              "Figure 4 (left, plotted): accuracy rises with the pre-training share t; t = T_pub is the best"),
        Claim("all public epochs as pre-training beat an even split", "pre_6_post_0", "pre_3_post_3",
              "Figure 4: the benefit of longer pre-training is small after t = 100 of 200"),
        Claim("an even split beats all public epochs as post-training", "pre_3_post_3", "pre_0_post_6",
              "Figure 4: accuracy increases with t"),
    ),
    axes={label: (CLIENT_LR, SERVER_LR) for label in ARMS},
    changes=EVALUATION,
    gates=emnist_gates(ARMS, private=ARMS),
    tuning_seeds=TUNING_SEEDS,
    control=public_only_control,
)


def main(argv: Sequence[str] | None = None) -> Path:
    return run(REPRODUCTION, argv)


if __name__ == "__main__":
    main()
