"""Which torch device a client trains on: the config's ``device`` (``auto``, ``cpu`` or ``cuda``) made concrete."""

from __future__ import annotations

import torch


def default_device() -> torch.device:
    """CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(name: str) -> torch.device:
    """The device ``name`` asks for (``auto``: :func:`default_device`); raises when ``cuda`` is asked for but absent."""
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: cuda was asked for, but no CUDA device is available (use auto or cpu)")
    return default_device() if name == "auto" else torch.device(name)
