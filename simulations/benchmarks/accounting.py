"""Benchmark: how long user-level accounting takes for a long run (2,000 rounds by default).

For PLD and RDP, Poisson sampling q = m/N (and RDP for fixed-size sampling), the table gives:

- ``ε, cold``: ε after T identical rounds in a fresh process state (the round's privacy curve is built);
- ``ε, cached``: the same again, the curve reused (what a run pays each time it reports ε);
- ``ε per round, T rounds``: reporting ε after every one of the T rounds with fedpub's accountant, per report
  (measured over the first ``--per-round`` rounds);
- ``calibrate z, cold``: the noise multiplier for the target ε by bisection, with an empty disk cache;
- ``calibrate z, cached``: the same call again (read from the calibration cache file).

    python -m fedpub.simulations.benchmarks.accounting [--rounds 2000] [--population 1000000] [--cohort 1000]
        [--epsilon 4] [--delta 1e-6] [--per-round 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dp_accounting import dp_event

from fedpub.privacy import composition
from fedpub.privacy.accountant import UserLevelAccountant, epsilon_for
from fedpub.privacy.calibration import calibrate_noise_multiplier
from fedpub.privacy.events import CohortRule, FixedSizeSampling, PoissonSampling, neighboring_relation, round_event


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def _per_round_report(sampling: CohortRule, z: float, kind: str, delta: float, rounds: int) -> float:
    """Mean seconds of composing one round and reporting ε, over ``rounds`` rounds."""
    accountant = UserLevelAccountant(kind, neighboring_relation(sampling))
    event = round_event(sampling, [dp_event.GaussianDpEvent(z)], 0)  # every round alike (Poisson, fixed size)
    started = time.perf_counter()
    for _ in range(rounds):
        accountant.compose(event)
        accountant.epsilon(delta)
    return (time.perf_counter() - started) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--population", type=int, default=1_000_000)
    parser.add_argument("--cohort", type=int, default=1000)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--per-round", type=int, default=20)
    args = parser.parse_args()
    settings: list[tuple[str, str, CohortRule]] = [
        ("pld", "Poisson", PoissonSampling(args.cohort / args.population)),
        ("rdp", "Poisson", PoissonSampling(args.cohort / args.population)),
        ("rdp", "fixed size", FixedSizeSampling(args.population, args.cohort)),
    ]
    print(f"T = {args.rounds} rounds, m = {args.cohort} of N = {args.population:,}, "
          f"target ε = {args.epsilon:g}, δ = {args.delta:g}")
    header = ["accountant", "sampling", "z", "ε", "ε cold s", "ε cached s", "ε per round s",
              "calibrate cold s", "calibrate cached s"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for kind, label, sampling in settings:
        with tempfile.TemporaryDirectory() as cache:
            calibrate = lambda: calibrate_noise_multiplier(  # noqa: E731
                args.epsilon, args.delta, sampling, args.rounds, kind, Path(cache)
            )
            composition.clear_cache()
            calibrate_cold, z = _timed(calibrate)
            calibrate_cached, _ = _timed(calibrate)
        composition.clear_cache()
        cold, epsilon = _timed(lambda: epsilon_for(sampling, z, args.rounds, args.delta, kind))
        cached, _ = _timed(lambda: epsilon_for(sampling, z, args.rounds, args.delta, kind))
        per_round = _per_round_report(sampling, z, kind, args.delta, args.per_round)
        cells = [kind, label, f"{z:.4f}", f"{epsilon:.4f}", f"{cold:.3f}", f"{cached:.3f}", f"{per_round:.3f}",
                 f"{calibrate_cold:.2f}", f"{calibrate_cached:.4f}"]
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
