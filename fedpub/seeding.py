"""Deterministic generators derived from (run seed, round, purpose): the only source of randomness."""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed that depends on every part (stable across processes and platforms)."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def torch_generator(*parts: int | str, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator seeded from ``parts``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(*parts))
    return gen


def numpy_generator(*parts: int | str) -> np.random.Generator:
    """A numpy generator seeded from ``parts``."""
    return np.random.default_rng(derive_seed(*parts))
