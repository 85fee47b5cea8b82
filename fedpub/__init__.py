"""fedpub: user-level differentially private federated learning that uses public users.

The core package is framework-free: it imports torch, numpy and dp_accounting, never flwr.

It is also the Python API's front door (README "Python API"): ``fedpub.run``, ``fedpub.build`` and
``fedpub.Result`` come from :mod:`simulations.api`, ``fedpub.load_config``, ``fedpub.parse_config``,
``fedpub.ExperimentConfig`` and ``fedpub.ConfigError`` from :mod:`fedpub.config`. They are imported on first use
(:func:`__getattr__`), so ``import fedpub`` loads nothing else and the core never depends on the layers above it:
this facade is the one place that names them (``tests/test_layers.py`` allows exactly it).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = {
    "run": "simulations.api",
    "build": "simulations.api",
    "Result": "simulations.api",
    "load_config": "fedpub.config",
    "parse_config": "fedpub.config",
    "ExperimentConfig": "fedpub.config",
    "ConfigError": "fedpub.config",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'fedpub' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
