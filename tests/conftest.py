"""Shared fixtures: a tiny synthetic EMNIST-layout dataset written once per session, and small configs; the property
tests' repeatable profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import settings

from fedpub.config import ExperimentConfig, parse_config
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, write_synthetic_emnist

TINY_SYNTHETIC = {"num_writers": 16, "min_examples": 6, "max_examples": 12, "seed": 1}

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile("repeatable")
"""The property tests draw the same cases on every run (a suite that passed passes again on a clean checkout);
``pytest --hypothesis-profile explore`` draws new ones (a case found there becomes an explicit ``@example``)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``extended`` (end-to-end runs of combinations the suite covers with a smaller one) run only when
    selected: ``pytest -m extended``."""
    expression = str(config.getoption("markexpr") or "")
    if "extended" in expression and "not extended" not in expression:
        return
    skip = pytest.mark.skip(reason="an extended end-to-end run; select it with -m extended")
    for item in items:
        if "extended" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_emnist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny_emnist")
    write_synthetic_emnist(directory, SyntheticEmnistSpec(**TINY_SYNTHETIC))
    return directory


@pytest.fixture(autouse=True)
def _calibration_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calibrations are cached in a per-session folder, never in the user's home."""
    monkeypatch.setenv("FEDPUB_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "fedpub_cache"))


def tiny_config(data_dir: Path, out_dir: Path, **overrides: Any) -> ExperimentConfig:
    """A 3-round DP-FedAvg run on the tiny dataset; ``overrides`` are merged section by section."""
    raw: dict[str, Any] = {
        "name": "tiny",
        "seed": 3,
        "rounds": 3,
        "eval_every": 1,
        "checkpoint_every": 1,
        "output_dir": str(out_dir),
        "device": "cpu",
        # every writer private (N = 16), evaluated on private users' test examples, labelled so: asked for
        # explicitly, since by default (`auto`, no public users) a fraction of them would be held out of N; a
        # run given public users evaluates on theirs (`auto`) unless it says otherwise
        "data": {"source": "synthetic_emnist", "path": str(data_dir), "synthetic": TINY_SYNTHETIC, "eval_clients": 4,
                 "eval_users": "all"},
        "model": {"name": "emnist_small_cnn"},
        # a fixed path: runs of one seed are the same model bit for bit (with `auto` to float rounding, as the
        # timed choice may differ run to run; tests/clients/test_path_choice.py tests `auto`)
        "client": {"epochs": 1, "batch_size": 4, "lr": 0.05, "path": "loop"},
        "strategy": {"name": "dp_fedavg", "clip_norm": 0.5, "noise_multiplier": 0.8,
                     "sampling": {"kind": "poisson", "clients_per_round": 4}},
        "privacy": {"delta": 1e-5},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    if raw["data"].get("public") and "eval_users" not in overrides.get("data", {}):
        raw["data"]["eval_users"] = "auto"
    return parse_config(raw)


@pytest.fixture
def one_torch_thread():
    """Train with one torch thread, as Flower's Ray actors do (``client_num_cpus: 1`` sets their
    OMP_NUM_THREADS): a convolution summed over another number of threads rounds differently in float32, so a
    comparison with updates trained in the actors must not depend on how many threads this process has."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
