"""Helpers of the tests that run an experiment in process on the tiny dataset and read its run directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from fedpub.config import ExperimentConfig
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory


def run(cfg: ExperimentConfig, **kwargs: Any) -> Any:
    """The run of ``cfg`` in process, in its run directory (``kwargs``: the engine's, e.g. ``on_round``)."""
    return run_in_process(build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name), **kwargs)


def records(root: Path) -> list[dict[str, Any]]:
    """The run directory's released per-round records (metrics.jsonl)."""
    return [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]


class Interrupt(Exception):
    """Raised from an ``on_round`` callback to stop a run mid-way (a resume test)."""


def assert_resumes_to_the_uninterrupted_run(make: Callable[[Path], ExperimentConfig], tmp_path: Path,
                                            stop_at: int) -> None:
    """The run of ``make(folder)`` stopped when round ``stop_at``'s record is written and resumed from its last
    checkpoint ends with the uninterrupted run's model bit for bit, its ε, and every round's record once."""
    whole = run(make(tmp_path / "whole"))
    cut = make(tmp_path / "cut")

    def stop(record: dict[str, Any]) -> None:
        if record["round"] == stop_at:
            raise Interrupt

    with pytest.raises(Interrupt):
        run(cut, on_round=stop)
    resumed = run(cut)
    for k in whole.params:
        assert torch.equal(whole.params[k], resumed.params[k]), k
    assert resumed.epsilon == pytest.approx(whole.epsilon)
    assert [r["round"] for r in records(cut.output_dir / cut.name)] == list(range(cut.rounds))
