"""Benchmark: client updates per second, in-process engine vs Flower simulation (Ray), same work.

Both backends run the identical experiment (synthetic EMNIST layout, the same model, cohort,
local epochs and seed; DP-FedAvg with noise) and write the usual run directory; the per-round
wall times come from its metrics.jsonl. "Steady" leaves out the first round (Ray start-up and
actor warm-up for Flower). Prints a table with both figures and their ratio.

    python -m simulations.benchmarks.backends [--writers 200] [--cohort 50] [--rounds 6] [--model emnist_small_cnn]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from fedpub.config import parse_config
from simulations.engine import run_in_process
from simulations.experiment import build_experiment, load_data
from simulations.flower_simulation import run_flower_simulation
from simulations.run_dir import RunDirectory


def _config(out: Path, data: Path, args: argparse.Namespace) -> dict:
    return {
        "name": "bench",
        "rounds": args.rounds,
        "eval_every": args.rounds,
        "checkpoint_every": args.rounds,
        "output_dir": str(out),
        "device": "cpu",
        "data": {
            "path": str(data),
            "synthetic": {"num_writers": args.writers, "min_examples": 20, "max_examples": 80, "seed": 0},
            "eval_clients": 20,
        },
        "model": {"name": args.model},
        "client": {"epochs": 1, "batch_size": 16, "lr": 0.05},
        "strategy": {
            "clip_norm": 0.5,
            "noise_multiplier": 1.0,
            "sampling": {"kind": "fixed", "clients_per_round": args.cohort},
        },
        "privacy": {"accountant": "rdp"},  # the only accountant for fixed-size sampling
        "flower": {"client_num_cpus": 1, "ray_num_cpus": 2},
    }


def _figures(run_root: Path, total_s: float) -> dict[str, float]:
    records = [json.loads(line) for line in (run_root / "metrics.jsonl").read_text().splitlines()]
    steady = records[1:] or records
    updates = sum(r["cohort_sampled"] for r in steady)
    steady_s = sum(r["wall_time"] for r in steady)
    return {
        "end_to_end_s": total_s,
        "steady_round_s": steady_s / len(steady),
        "updates_per_s": updates / steady_s,
        "end_to_end_updates_per_s": sum(r["cohort_sampled"] for r in records) / total_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=int, default=200)
    parser.add_argument("--cohort", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--model", default="emnist_small_cnn")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        load_data(parse_config(_config(root, root / "data", args)))  # generates the data outside the timings
        figures = {}
        for backend in ("inprocess", "flower"):
            cfg = parse_config(_config(root / backend, root / "data", args))
            started = time.perf_counter()
            if backend == "flower":
                run_flower_simulation(cfg, num_supernodes=args.writers, fresh=True)
            else:
                run_in_process(build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name), fresh=True)
            figures[backend] = _figures(cfg.output_dir / cfg.name, time.perf_counter() - started)
    print(f"\nsame task: {args.model}, {args.writers} users, {args.cohort} per round, 1 local epoch, {args.rounds} rounds")
    print(f"{'backend':<12}{'end-to-end s':>14}{'steady s/round':>16}{'updates/s':>12}{'e2e updates/s':>15}")
    for backend, f in figures.items():
        print(f"{backend:<12}{f['end_to_end_s']:>14.1f}{f['steady_round_s']:>16.3f}{f['updates_per_s']:>12.1f}{f['end_to_end_updates_per_s']:>15.1f}")
    ratio = figures["inprocess"]["updates_per_s"] / figures["flower"]["updates_per_s"]
    e2e = figures["inprocess"]["end_to_end_updates_per_s"] / figures["flower"]["end_to_end_updates_per_s"]
    print(f"in-process / Flower: {ratio:.2f}x steady, {e2e:.2f}x end to end")


if __name__ == "__main__":
    main()
