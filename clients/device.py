"""Which torch device a client trains on: the config's ``device`` (``auto`` or any torch device string: ``cpu``,
``cuda``, ``cuda:1``, ``mps``, ...) made concrete, refused with the device's name when this machine lacks it."""

from __future__ import annotations

import torch


def default_device() -> torch.device:
    """CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(name: str) -> torch.device:
    """The device ``name`` asks for (``auto``: :func:`default_device`); a ValueError naming it when torch does not
    know it or this machine does not have it."""
    if name == "auto":
        return default_device()
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"device: {name!r} is not a torch device ({error})") from None
    if device.type == "cpu":
        return device
    backend = getattr(torch, device.type, None)
    if device.type == "mps":
        available, count = torch.backends.mps.is_available(), 1
    elif backend is not None and hasattr(backend, "is_available"):
        available = bool(backend.is_available())
        count = int(backend.device_count()) if available and hasattr(backend, "device_count") else 0
    else:
        available, count = False, 0
    if not available:
        raise ValueError(f"device: {name} was asked for, but this machine has no {device.type} device "
                         "(use auto or cpu)")
    if device.index is not None and device.index >= count:
        raise ValueError(f"device: {name} was asked for, but this machine has {count} {device.type} device(s) "
                         f"({', '.join(f'{device.type}:{i}' for i in range(count))})")
    return device
