"""fedpub: user-level differentially private federated learning that uses public users.

The core package is framework-free: it imports torch, numpy and dp_accounting, never flwr.

It is also the Python API's front door (docs/guides/python-api.md): ``fedpub.run``, ``fedpub.build`` and
``fedpub.Result`` come from :mod:`fedpub.simulations.run.api`, ``fedpub.load_config``, ``fedpub.parse_config``,
``fedpub.ExperimentConfig`` and ``fedpub.ConfigError`` from :mod:`fedpub.config`. They are imported on first use
(:func:`__getattr__`), so ``import fedpub`` loads nothing else and the core never depends on the layers above it:
this facade is the one place that names them (``tests/test_layers.py`` allows exactly it).

Installed, the repository's folders ``strategies/``, ``clients/`` and ``simulations/`` are fedpub's subpackages
``fedpub.strategies``, ``fedpub.clients`` and ``fedpub.simulations`` (``pyproject.toml``'s package-dir), names a
user's own ``strategies.py`` cannot shadow. In a source tree or a Flower App bundle (``flwr run .``), where they sit
beside ``fedpub/``, the package's search path takes in that parent folder so the same names resolve.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

_API = {
    "run": "fedpub.simulations.run.api",
    "build": "fedpub.simulations.run.api",
    "Result": "fedpub.simulations.run.api",
    "load_config": "fedpub.config",
    "parse_config": "fedpub.config",
    "ExperimentConfig": "fedpub.config",
    "ConfigError": "fedpub.config",
}
__all__ = ["__version__", *_API]

_SOURCE_TREE = Path(__file__).resolve().parent.parent
if not (Path(__file__).resolve().parent / "simulations").is_dir() and (_SOURCE_TREE / "simulations" / "__init__.py").is_file():
    __path__.append(str(_SOURCE_TREE))


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'fedpub' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
