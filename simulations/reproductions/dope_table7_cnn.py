"""Seed 003 (Nasr et al. 2023), Table 7 at the size where it is decisive: :mod:`.dope_table7`'s arms (DP-SGD on all
users, the only-private arm, DOPE, DOPE with the recentering removed) and public-only on the small CNN
(``emnist_small_cnn``, d = 18,378) over 10,000 writers in a hard style, 500 private users a round, 150 rounds,
ε = 2: the regime probe's ``simulations/configs/public_emnist_gate_cnn.yaml``, where on an NVIDIA H200 DP-FedAvg on
the private users reached 0.862 against public-only's 0.840 (one seed), so the public-only gate can pass.
``python -m fedpub.simulations.reproductions.dope_table7_cnn [--quick] [--jobs N] [--seeds N] [--out DIR]``.

**Its cost, and the plan on a GPU in slices** (fedpub issue 45, item 5, 003). A run is about 100 s on an H200
(0.67 s a round) and 21 minutes on 2 CPU cores; the design (4 arms × a 2 × 2 grid extended once to 3 × 3 × 3 tuning
seeds, then 4 arms × 3 test seeds: 120 runs, plus public-only's tuning) is about 3.5 h of one H200, 40 h on 2
cores. The runner resumes: a finished run is never rerun, an interrupted one restarts from its last checkpoint
(every 50 rounds, about 35 s on the H200), and an interrupt (SIGINT) exits 130 keeping everything. So it runs in
slices of at most 10 minutes of GPU time each:

    timeout -s INT 540 python -m fedpub.simulations.reproductions.dope_table7_cnn --out $OUT/dope_table7_cnn

carrying ``runs/reproductions/dope_table7_cnn`` to the device (its run folders are small: an 18,378-parameter model
a checkpoint) and its ``$OUT`` copy back; the synthetic writers (about 500 MB, 130 s to generate on the H200) are
made anew on a fresh device, so each slice finishes about 3 runs. At 15 minutes of device time a session, the
design takes about 40 sessions; until it has run, the CPU proxy (:mod:`.dope_proxy`) is seed 003's mechanism
check on the results page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedpub.strict_yaml import load_yaml
from fedpub.simulations.tools.compare import deep_merge
from fedpub.simulations.reproductions import dope_table7
from fedpub.simulations.reproductions.federated import run

GATE_CNN = Path(__file__).parents[1] / "configs" / "public_emnist_gate_cnn.yaml"


def cnn_regime(gate: dict[str, Any]) -> dict[str, Any]:
    """:data:`.dope_table7.REGIME` with the probe's model, writers (their style and folder), clip, batch size and
    device: what made the gate pass; the arms, ε, sampling and evaluation stay the sweep's."""
    return deep_merge(dope_table7.REGIME, {
        "model": gate["model"], "device": gate["device"], "rounds": gate["rounds"],
        "data": {"path": gate["data"]["path"], "synthetic": gate["data"]["synthetic"]},
        "client": {"batch_size": gate["client"]["batch_size"]},
        "strategy": {"clip_norm": gate["strategy"]["clip_norm"], "sampling": gate["strategy"]["sampling"]},
    })


REPRODUCTION = dataclasses.replace(
    dope_table7.REPRODUCTION,
    name="dope_table7_cnn",
    title="Seed 003, Table 7 on the small CNN at the gate probe's size (10,000 hard-style writers)",
    changes=cnn_regime(load_yaml(GATE_CNN.read_text(encoding="utf-8"))),
)


def main(argv: Sequence[str] | None = None) -> Path:
    return run(REPRODUCTION, argv)


if __name__ == "__main__":
    main()
