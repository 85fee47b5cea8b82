"""The FLOP-bound floor of a round: its local training's arithmetic at the device's matrix-multiply rate.

No implementation can train a round faster than the multiply-adds of its local SGD steps take at the rate the
device multiplies large matrices. The throughput benchmark divides each path's seconds per round by that time
(``x_flop_floor``; issue 7's GPU target is a 100-user EMNIST CNN round within 3×). The FLOPs are counted by
:class:`torch.utils.flop_counter.FlopCounterMode` while the bare loop runs the round's steps: matrix products and
convolutions, forward and backward, the work that dominates these models (elementwise operations and the SGD
update are not counted, so the floor is a lower bound). The rate is that of one large float32 matrix product
with PyTorch's default precision settings, the best of a few runs.
"""

from __future__ import annotations

import time

import torch

MATMUL_SIZE = {"cpu": 2048, "cuda": 8192}
"""Side of the square float32 matrices whose product measures a device's rate (large enough to be
compute-bound, small enough to take well under a second)."""


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a GPU runs asynchronously); nothing to wait for on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops_per_second(device: torch.device, *, size: int | None = None, repeats: int = 5) -> float:
    """FLOP/s of a ``size``×``size`` float32 matrix product on ``device`` (2·size³ FLOPs), the best of
    ``repeats`` runs after one warm-up."""
    size = size or MATMUL_SIZE[device.type]
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, generator=generator)
    b = torch.randn(size, size, device=device, generator=generator)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        torch.mm(a, b)
        synchronize(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best

