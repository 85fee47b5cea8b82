"""Benchmark: the expected error of banded matrix-factorization DP-FTRL's noise, and what finding it costs.

For each number of rounds T and bands b (b ≤ T), the table gives the banded square root's (BSR, Kalinin and Lampert
2024) and the optimized banded factorization's (Choquette-Choo et al. 2023, Toeplitz) expected squared error of
the T released prefix sums relative to DP-FedAvg's (b = 1, independent noise of the same sensitivity: ‖B‖_F² over
‖A‖_F²), the seconds each took, and the seconds of the optimized call again, read from its cache and re-priced.
The optimized search starts with an empty cache (a temporary folder). Each error evaluation is O(T·b)
(``fedpub/privacy/banded_factorization.py``), so the search takes a fraction of a second even at T = 3,000, b = 64.

    python -m fedpub.simulations.benchmarks.banded_factorization [--rounds 100 1000 3000] [--bands 1 4 16 64]
        [--momentum 0.0]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from fedpub.privacy.banded_factorization import BandedFactorization, banded_square_root, optimized_banded


def _timed(fn: Callable[[], BandedFactorization]) -> tuple[float, BandedFactorization]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, nargs="+", default=[100, 1000, 3000])
    parser.add_argument("--bands", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--momentum", type=float, default=0.0)
    args = parser.parse_args()
    print(f"momentum {args.momentum:g}; relative error = ‖B‖_F² / ‖A‖_F² (DP-FedAvg = 1)")
    print(f"{'T':>6} {'b':>4} {'BSR error':>10} {'BSR s':>8} {'opt error':>10} {'opt s':>8} {'opt/BSR':>8} "
          f"{'cached s':>9}")
    with tempfile.TemporaryDirectory() as cache:
        for rounds in args.rounds:
            for bands in (b for b in args.bands if b <= rounds):
                bsr_seconds, bsr = _timed(lambda: banded_square_root(rounds, bands, args.momentum))
                optimize = partial(optimized_banded, rounds, bands, args.momentum, cache=Path(cache))
                opt_seconds, optimized = _timed(optimize)
                cached_seconds, _ = _timed(optimize)
                print(f"{rounds:>6} {bands:>4} {bsr.relative_error():>10.4f} {bsr_seconds:>8.4f} "
                      f"{optimized.relative_error():>10.4f} {opt_seconds:>8.4f} "
                      f"{optimized.expected_error() / bsr.expected_error():>8.4f} {cached_seconds:>9.4f}")


if __name__ == "__main__":
    main()
