"""Seed 003 (Nasr et al. 2023, "Effectively using public data in privacy preserving machine
learning") Table 7 in federated form: DP-FedAvg on all users, DP on the private users only, and
DOPE-SGD, with 2% of the users public, at ε ∈ {0.5, 1, 2, 4}, δ = 1e-5, on the offline
EMNIST-layout data (the paper: EMNIST's 70,000 users and a WideResNet; here 1,000 synthetic writers
and the small CNN). ``python -m fedpub.simulations.reproductions.dope_table7``.
"""

from __future__ import annotations

from pathlib import Path

from fedpub.simulations.reproductions.claims import Claim, reproduce

SWEEP = Path(__file__).with_suffix(".yaml")
PAPER = (
    "The paper (Table 7, EMNIST, 2% public users, user-level δ = 1e-5): DP-SGD (all) 82.2 / 83.4 / 85.0 / "
    "86.2%, DP-SGD (only-private) 83.1 / 84.6 / 85.5 / 86.4%, DOPE-SGD 84.7 / 85.2 / 86.0 / 87.1% at "
    "ε = 0.5 / 1 / 2 / 4."
)
CLAIMS = (
    Claim("DOPE-SGD beats DP-SGD on all users at every ε", "dope", "dp_fedavg_all"),
    Claim("DOPE-SGD beats DP only on the private users at every ε", "dope", "dp_fedavg_only_private"),
    Claim("DP only on the private users beats DP-SGD on all users", "dp_fedavg_only_private", "dp_fedavg_all"),
)


def main() -> None:
    reproduce(SWEEP, "Seed 003, Table 7 (federated DOPE-SGD)", PAPER, CLAIMS)


if __name__ == "__main__":
    main()
