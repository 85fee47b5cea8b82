"""Seed 002 (Li et al. 2023, "Private adaptive optimization with side information", §6.2, Fig. 6, Table 9 and
Alg. 3) in federated form on a look-alike StackOverflow vocabulary that is dense, with the paper's own side
information (fedpub issue 45, item 5: one experiment where the mechanism can act).
``python -m fedpub.simulations.reproductions.adadps_dense [--seeds 5] [--jobs 2] [--quick] [--out DIR]``.

**Why another look-alike.** :mod:`.adadps_stackoverflow`'s data draw about 400 of its 10,004 words, so the
token-frequency A, normalised by the mean over the whole vocabulary, slowed the very topic words that carry the tag.
Here the vocabulary is dense (:data:`DENSE`: 10 tags of 200 topic words of their own, half of a post's words topical,
a background of the 7,800 most frequent English words with their frequencies: 9,521 of the 10,000 words are
drawn), and the side information is the paper's own: its federated StackOverflow code keeps its 100 most
frequent words at A = 1 and multiplies every other word's gradient by 200 (``precondition.profile: top_k``), which
on these data is aligned by construction (the 100 most frequent words are label-free background; the topic words
are all below them).

**What the probes showed** (one seed, σ = 0.3, 20 users a round, 40 rounds of one local epoch of batch 100, 2
shared cores, ≈ 13 s a run): AdaDPS with the paper's A reached 0.61 test accuracy (client lr 1, server lr 3, clip
10; 0.41-0.52 at neighbouring points) while DP-FedAvg stayed below or within a point of the majority tag's 0.316 at
every point tried (client lr 1-30, server lr 1-10, clip 2-30, 1 or 5 local epochs; best 0.321), and so did
non-private FedAvg (client lr 10: 0.316; 30: 0.18): the bias and the frequent words bound plain SGD's step, and the
rare topic words do not move in 40 rounds. Centralised full-batch SGD (150 steps) on a variant with 900 topic words
a tag agrees: 0.316 or below at every lr from 1 to 10, 0.83 with the paper's A at lr 10. This is the paper's Table
9 regime (non-private StackOverflow: SGD 0.38, with side information 0.64) sharpened: the claim against DP-FedAvg
may well be not testable here (its private step tuned down to nothing), and the claim that decides whether the
*side information* acts is the one against the shuffled control, which has the same A values on other occurring
words and runs at the AdaDPS arm's tuned values (``follows``).

**Setting**: the paper's federated run (its ``run.sh``): σ = 0.3, 20 users a round (Poisson here, fixed 20 there),
40 rounds, one local epoch of batch 100, δ = 0.0025 (user-level ε ≈ 28 by PLD; the paper reports 34). Both arms
tune client lr, server lr and clip on one union grid (3 × 3 × 3) on the validation users with three tuning seeds,
**not extended** (``max_extensions=0``): the first full run's DP-FedAvg chose the grid's low corner (client lr 0.3,
server lr 1; no point learns, so the least movement scores best) and each extension of the 3-axis union grid costs
both arms about 37 points × 3 seeds (220 runs, 45 minutes on 2 shared cores) to move DP-FedAvg further towards not
training at all; the runner's gate reports the low edge, and a chosen value still on an edge is flagged. Each claim
is judged at the arms' own points and with AdaDPS at DP-FedAvg's (:mod:`.federated`).
**Gates**: the side-information arm must beat the majority tag by 5 points (some private training learns), and no
tuned landscape may be flat; the runner's per-claim gate makes a claim not testable where an arm's server lr is
tuned to its grid's low edge. What this cannot show: the paper's data (a generator is not StackOverflow), and its
DP-FedAdam comparison (not run: its Adam rates would join the union grid's server lr axis, doubling the budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedpub.simulations.tools.compare import deep_merge
from fedpub.simulations.reproductions.adadps_stackoverflow import MAJORITY, achieved_epsilon, majority_tag_control
from fedpub.simulations.reproductions.federated import EVALUATION, FLAT, FederatedReproduction, run
from fedpub.simulations.reproductions.judge import Beats, Claim, NotFlat
from fedpub.simulations.reproductions.tuning import Axis

DENSE: dict[str, Any] = {"side_information": "aligned", "background": "wordfreq", "background_size": 0,
                         "num_words": 10_000, "num_tags": 10, "topic_words": 200, "topic_share": 0.5,
                         "min_examples": 20, "max_examples": 60}
"""The dense data: 10 tags of 200 topic words of their own, and a background of the other 7,800 words with English's
frequencies (``wordfreq``), half of a post's words topical, 20-60 posts a user."""
SETTING: dict[str, Any] = deep_merge(EVALUATION, {
    "rounds": 40,
    "eval_every": 10,
    "client": {"epochs": 1, "batch_size": 100},
    "strategy": {"noise_multiplier": 0.3, "clip_norm": 10.0, "sampling": {"kind": "poisson", "clients_per_round": 20}},
    "privacy": {"delta": 0.0025},
    "data": {"path": "data/synthetic_stackoverflow_dense", "synthetic_stackoverflow": DENSE},
})
QUICK: dict[str, Any] = {
    "rounds": 2, "eval_every": 2,
    "data": {"eval_clients": 10, "synthetic_stackoverflow": {"num_clients": 40, "test_clients": 10, "min_examples": 2,
                                                             "max_examples": 6}},
    "strategy": {"sampling": {"clients_per_round": 5}},
}
"""``--quick``: 40 users, 2 rounds, 5 users a round."""
SIDE_INFORMATION, SHUFFLED = "adadps_top_k", "adadps_top_k_shuffled"
ARMS = ("dp_fedavg", SIDE_INFORMATION, SHUFFLED)
GRID = (Axis("client.lr", (0.3, 1.0, 3.0)), Axis("strategy.server_optimizer.lr", (1.0, 3.0, 10.0)),
        Axis("strategy.clip_norm", (3.0, 10.0, 30.0)))
"""Around the probes' best AdaDPS point (client lr 1, server lr 3, clip 10); DP-FedAvg's probes found no point
that learns."""
PAPER = (
    "Li et al. 2023, Fig. 6 (StackOverflow, 400 users, 20 per round, σ = 0.3, user-level (34, 0.0025)-DP): AdaDPS "
    "improves test accuracy over DP-FedAvg and DP-FedAdam by about 5 points; Table 9 (non-private, centralised): "
    "StackOverflow logistic regression 0.38 with SGD, 0.64 with side information."
)

REPRODUCTION = FederatedReproduction(
    name="adadps_dense",
    seed_paper="002",
    title="Seed 002: AdaDPS with the paper's side information on a dense look-alike vocabulary (federated, Alg. 3)",
    paper=PAPER,
    sweep=Path(__file__).with_suffix(".yaml"),
    claims=(
        Claim("AdaDPS with the paper's side information (its 100 most frequent words at A = 1, the rest ×200) beats "
              "DP-FedAvg", SIDE_INFORMATION, "dp_fedavg", "about +5 points (Fig. 6)", paper_effect=0.05),
        Claim("AdaDPS with the paper's side information beats the same A values shuffled among the words that occur "
              "(the side information, not a rescaling)", SIDE_INFORMATION, SHUFFLED,
              "none: a mechanism control the paper does not run (fedpub issue 45)"),
    ),
    axes={"dp_fedavg": GRID, SIDE_INFORMATION: GRID},
    max_extensions=0,
    gates=(Beats((SIDE_INFORMATION,), MAJORITY, 0.05, "the majority-tag predictor"),
           NotFlat(("dp_fedavg", SIDE_INFORMATION), FLAT)),
    follows={SHUFFLED: SIDE_INFORMATION},
    changes=SETTING,
    quick=QUICK,
    control=majority_tag_control,
    setting=achieved_epsilon,
)


def main(argv: Sequence[str] | None = None) -> Path:
    return run(REPRODUCTION, argv)


if __name__ == "__main__":
    main()
