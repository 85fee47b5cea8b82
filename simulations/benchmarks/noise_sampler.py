"""Benchmark: draws per second of the server's Gaussian noise, torch's seeded ``normal_`` (the default) against
OpenDP's Gaussian mechanism (``privacy.noise_sampler: opendp``, fedpub/privacy/secure_noise.py), on the CPU, for
float32 vectors of each size; and the sample std of the noise over the requested std (1 within sampling error).
Each cell is the best of ``--repeats`` calls (one call for OpenDP at sizes of 10^6 and more: it takes a minute).

    python -m fedpub.simulations.benchmarks.noise_sampler [--sizes 10000 100000 1000000] [--std 0.5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from fedpub.privacy.secure_noise import add_secure_gaussian


def _best(fn: Callable[[], torch.Tensor], repeats: int) -> tuple[float, torch.Tensor]:
    best, out = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--std", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    print(f"{'entries':>10} {'sampler':>8} {'seconds':>10} {'draws/s':>12} {'std/requested':>14}")
    for n in args.sizes:
        values = torch.randn(n, generator=generator)
        samplers = {
            "torch": (lambda: torch.empty(n).normal_(generator=generator).mul_(args.std).add_(values), args.repeats),
            "opendp": (lambda: add_secure_gaussian(values, args.std), 1 if n >= 1_000_000 else args.repeats),
        }
        for name, (draw, repeats) in samplers.items():
            seconds, noisy = _best(draw, repeats)
            ratio = (noisy - values).double().std().item() / args.std
            print(f"{n:>10} {name:>8} {seconds:>10.4f} {n / seconds:>12.3g} {ratio:>14.4f}")


if __name__ == "__main__":
    main()
