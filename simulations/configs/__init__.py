"""Experiment configs shipped with fedpub; ``quickstart.yaml`` is what ``fedpub run`` runs by default."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def quickstart_config_path() -> Path:
    return Path(str(resources.files(__name__) / "quickstart.yaml"))
