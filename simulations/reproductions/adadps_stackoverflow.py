"""Seed 002 (Li et al. 2023, "Private adaptive optimization with side information", §6.2, Fig. 6 and
Alg. 3) in federated form on look-alike StackOverflow tag-prediction data: DP-FedAvg, DP-FedAdam and
AdaDPS with side information (token frequencies, each local step divided by A), 20 of 400 users per
round, noise multiplier σ = 0.3, 40 rounds, and the user-level ε that costs at δ = 1/400 (the paper
reports (34, 0.0025)). ``python -m fedpub.simulations.reproductions.adadps_stackoverflow [--seeds 3]``.

The look-alike data put each tag's topic words at frequency ranks 2,000 and beyond
(``topic_rank_offset``): the tag signal is in rare words, as the paper argues it is on StackOverflow, which
is what token-frequency side information exploits. (With the default offset 0 the popular tags' topic words
are the most frequent words, and AdaDPS has nothing to gain: a one-seed run there ended with every method at
the majority-tag accuracy.) The runs have a fixed σ, so they are run and compared directly (no ε target):
their ε is what the accountant composes. The paper samples a fixed 20 users per round; here Poisson sampling with 20
expected (PLD accountant; the RDP value is in each run's ledger).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from fedpub.atomic import write_text_atomic
from fedpub.config import parse_config
from fedpub.simulations.compare import deep_merge
from fedpub.simulations.compare_report import read_run, write_comparison
from fedpub.simulations.configs import quickstart_config_path
from fedpub.simulations.engine import run_in_process
from fedpub.simulations.experiment import build_experiment
from fedpub.simulations.reproductions.claims import Claim, verdicts
from fedpub.simulations.run_dir import RunDirectory

BASE = quickstart_config_path().parent / "stackoverflow_tag_single.yaml"
SETTING: dict[str, Any] = {
    "rounds": 40,
    "eval_every": 10,
    "strategy": {"noise_multiplier": 0.3, "clip_norm": 1.0, "sampling": {"kind": "poisson", "clients_per_round": 20}},
    "privacy": {"delta": 0.0025},
    "data": {
        "path": "data/synthetic_stackoverflow_rare_topics",
        "synthetic_stackoverflow": {"topic_rank_offset": 2000},
    },
}
STRATEGIES: dict[str, dict[str, Any]] = {
    "dp_fedavg": {"strategy": {"server_optimizer": {"name": "sgd", "lr": 1.0, "momentum": 0.0}}},
    "dp_fedadam": {"strategy": {"server_optimizer": {"name": "adam", "lr": 0.01}}},
    "adadps_token_frequency": {
        "strategy": {"name": "adadps", "precondition": {"source": "token_frequency", "placement": "client"},
                     "server_optimizer": {"name": "sgd", "lr": 1.0, "momentum": 0.0}},
    },
}
PAPER = (
    "The paper (Fig. 6, StackOverflow, 400 users, 20 per round, σ = 0.3, user-level (34, 0.0025)-DP): AdaDPS "
    "improves test accuracy over DP-FedAvg and DP-FedAdam by about 5 points."
)
CLAIMS = (
    Claim("AdaDPS with token frequencies beats DP-FedAvg", "adadps_token_frequency", "dp_fedavg"),
    Claim("AdaDPS with token frequencies beats DP-FedAdam", "adadps_token_frequency", "dp_fedadam"),
)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per strategy (default 3, the fewest the claim judge accepts)")
    parser.add_argument("--rounds", type=int, default=SETTING["rounds"], help="rounds per run (default 40)")
    parser.add_argument("--data", type=Path, default=None, help="look-alike data folder (default: the config's)")
    parser.add_argument("--out", type=Path, default=Path("runs/reproductions/adadps_stackoverflow"))
    args = parser.parse_args(argv)
    base = deep_merge(yaml.safe_load(BASE.read_text()), {**SETTING, "rounds": args.rounds})
    if args.data is not None:
        base = deep_merge(base, {"data": {"path": str(args.data)}})
    compared = []
    for label, overrides in STRATEGIES.items():
        for seed in range(args.seeds):
            raw = deep_merge(base, {**overrides, "name": f"{label}__seed{seed}", "seed": seed,
                                    "output_dir": str(args.out / "runs")})
            config = parse_config(raw, f"{label} seed {seed}")
            run_dir = RunDirectory(config.output_dir / config.name)
            result = run_in_process(build_experiment(config), run_dir)
            print(f"{label} seed {seed}: accuracy {result.final_metrics['eval_accuracy']:.4f}, "
                  f"ε {result.epsilon:.3g} at δ {result.delta:g}", flush=True)
            compared.append(read_run(run_dir, label, result.final_metrics))
    write_comparison(args.out, compared, "Seed 002: AdaDPS on StackOverflow tags (federated)")
    epsilon = compared[0].row["epsilon"]
    lines = [
        "# Seed 002: AdaDPS with side information, federated (Alg. 3)", "", PAPER, "",
        f"Here: {len(compared)} runs, user-level ε = {epsilon:.3g} at δ = 0.0025 (PLD) for σ = 0.3, 20 of 400 "
        f"users per round, {args.rounds} rounds — the paper reports ε = 34 for its setting (fixed-size sampling, "
        "its own accountant).", "", "## Claims checked", "",
        *verdicts([c.row for c in compared], "accuracy", CLAIMS), "",
        "The table is `compare.md`, the plots `accuracy_vs_epsilon.png` and `accuracy_vs_round.png`. "
        "Hyper-parameter tuning is not counted in ε.", "",
    ]
    path = args.out / "comparison.md"
    write_text_atomic(path, "\n".join(lines))
    print("\n".join(lines))
    return path


if __name__ == "__main__":
    main()
