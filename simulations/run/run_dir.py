"""What a run leaves behind in ``runs/<name>/`` (docs/design.md §8), each file written atomically.

Released (what DP covers, or says plainly that it does not): ``config.yaml`` (resolved), ``metrics.jsonl`` (one
record per round), ``ledger.json`` (the composed DpEvent and ε), ``accuracy.png`` and ``summary.md``,
``final_metrics.json`` (the released model's final evaluation); ``released_model.pt`` when the released model is
not the last private one (model reuse). With trackers (the config's ``tracking``): ``tracking.json`` (the ids of
their W&B and MLflow runs, so a resumed run continues them), ``tensorboard/`` and ``wandb/`` (their own files).

Not released: ``diagnostics.jsonl`` (one record per round of un-noised statistics of the private users, outside
the DP guarantee; written only when diagnostics are on), ``paths.json`` (how the in-process engine trains each
(model, group size), chosen by timing, which a resumed run reuses; its group sizes come from the private users'
example counts) and ``checkpoint.pt`` (model, step states with the noise generators, the privacy seed, the
accountant, the config that wrote it), which are the server's alone. Run directories are shared and downloaded to be
resumed, so a checkpoint is read as tensors and plain data only (torch's weights-only loader): a file that holds
anything else, or that is cut short, is refused naming it, and nothing in it runs.
"""

from __future__ import annotations

import json
import math
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fedpub.atomic import atomic_path, write_text_atomic


class RunDirectoryError(RuntimeError):
    """The run directory holds a different experiment, or a file a run cannot resume from; choose another name or
    start fresh."""


class RunDirectory:
    """The files of one run; nothing is created until :meth:`start` is called."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    config_path = property(lambda self: self.root / "config.yaml")
    metrics_path = property(lambda self: self.root / "metrics.jsonl")
    diagnostics_path = property(lambda self: self.root / "diagnostics.jsonl")
    ledger_path = property(lambda self: self.root / "ledger.json")
    checkpoint_path = property(lambda self: self.root / "checkpoint.pt")
    plot_path = property(lambda self: self.root / "accuracy.png")
    summary_path = property(lambda self: self.root / "summary.md")
    released_path = property(lambda self: self.root / "released_model.pt")
    final_metrics_path = property(lambda self: self.root / "final_metrics.json")
    tracking_path = property(lambda self: self.root / "tracking.json")
    paths_path = property(lambda self: self.root / "paths.json")

    def start(self, resolved_config: str) -> None:
        """Create the directory, write the config and remove what a killed writer left (its temporary files)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for path in self._files():
            for leftover in self.root.glob(f".{path.name}.*.tmp"):
                leftover.unlink(missing_ok=True)
        write_text_atomic(self.config_path, resolved_config)

    def stored_config(self) -> str | None:
        return self.config_path.read_text() if self.config_path.exists() else None

    # -- per-round records -------------------------------------------------------------
    def append_metrics(self, record: Mapping[str, Any]) -> None:
        _append(self.metrics_path, record)

    def read_metrics(self) -> list[dict[str, Any]]:
        """The released records; a last line cut short (the process killed while appending it) is left out."""
        return _read_records(self.metrics_path)

    def append_diagnostics(self, record: Mapping[str, Any]) -> None:
        _append(self.diagnostics_path, record)

    def read_diagnostics(self) -> list[dict[str, Any]]:
        """The diagnostics records (none when diagnostics are off)."""
        return _read_records(self.diagnostics_path)

    def truncate_records(self, rounds_done: int) -> None:
        """Keep only the metrics and diagnostics of rounds ``< rounds_done`` (those the checkpoint covers)."""
        for path in (self.metrics_path, self.diagnostics_path):
            if not path.exists():
                continue
            kept = [r for r in _read_records(path) if r["round"] < rounds_done]
            write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))

    # -- checkpoints -------------------------------------------------------------------
    def save_checkpoint(self, checkpoint: Mapping[str, Any]) -> None:
        with atomic_path(self.checkpoint_path) as tmp:
            torch.save(dict(checkpoint), tmp)

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint (tensors and plain data: nothing in the file is run), or None when there is none. Raises a
        RunDirectoryError naming the file when it cannot be read so: cut short, not written by torch, or holding
        other objects (a pickle that would run code)."""
        path = self.checkpoint_path
        if not path.exists():
            return None
        try:
            checkpoint = torch.load(path, weights_only=True)
        except Exception as err:  # noqa: BLE001 — a foreign file raises anything (EOFError, KeyError, ...)
            raise RunDirectoryError(
                f"{path} cannot be resumed from: {_load_failure(err)}; remove it or start the run again with --fresh"
            ) from err
        if not isinstance(checkpoint, dict):
            raise RunDirectoryError(
                f"{path} is not a fedpub checkpoint (it holds a {type(checkpoint).__name__}, not a dict); remove it "
                "or start the run again with --fresh"
            )
        return checkpoint

    def save_final_metrics(self, metrics: Mapping[str, float | str]) -> None:
        """The released model's final evaluation (after model reuse, if any) and ``evaluated_on``."""
        write_text_atomic(self.final_metrics_path, json.dumps(_jsonable(metrics), indent=1))

    def save_paths(self, choices: Mapping[str, Any]) -> None:
        """How the cohort trainer trains each (model, group size), chosen by timing
        (:meth:`~fedpub.clients.cohort_training.CohortTrainer.choices`)."""
        write_text_atomic(self.paths_path, json.dumps(dict(choices), indent=1, ensure_ascii=False) + "\n")

    def load_paths(self) -> dict[str, Any] | None:
        """The stored path choices, or None when there are none."""
        return json.loads(self.paths_path.read_text()) if self.paths_path.exists() else None

    def holds_finished_run(self) -> bool:
        """Whether a run finished here: :meth:`~fedpub.simulations.run.session.RunSession.finish` writes the summary and the
        final metrics last."""
        return self.summary_path.exists() and self.final_metrics_path.exists()

    def read_final_metrics(self) -> dict[str, float | str] | None:
        if not self.final_metrics_path.exists():
            return None
        return json.loads(self.final_metrics_path.read_text())

    def save_released_params(self, params: Mapping[str, torch.Tensor]) -> None:
        with atomic_path(self.released_path) as tmp:
            torch.save({k: v.detach().cpu() for k, v in params.items()}, tmp)

    def load_released_params(self) -> dict[str, torch.Tensor] | None:
        """The released model when it is not the last private one (model reuse), else None."""
        if not self.released_path.exists():
            return None
        return torch.load(self.released_path, weights_only=True)

    def _files(self) -> tuple[Path, ...]:
        return (self.config_path, self.metrics_path, self.diagnostics_path, self.ledger_path, self.checkpoint_path,
                self.plot_path, self.summary_path, self.released_path, self.final_metrics_path, self.tracking_path,
                self.paths_path)

    def clear(self) -> None:
        """Remove the files a run writes (for ``--fresh``); other files are left alone."""
        for path in self._files():
            path.unlink(missing_ok=True)


def _load_failure(err: Exception) -> str:
    """Why torch's weights-only loader refused a file, in one line."""
    if isinstance(err, pickle.UnpicklingError):
        named = re.search(r"GLOBAL ([\w.]+)", str(err))
        return "it holds objects other than tensors and plain data, which are never unpickled" + (
            f" (it asks for {named[1]})" if named else ""
        )
    first = str(err).split(". ")[0].strip()
    return f"it is cut short or not a torch file ({type(err).__name__}{': ' + first if first else ''})"


def _append(path: Path, record: Mapping[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(_jsonable(record)) + "\n")


def _read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path``; a last line cut short (the process killed while appending it) is left out."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        try:
            json.loads(lines[-1])
        except json.JSONDecodeError:
            lines.pop()
    return [json.loads(line) for line in lines if line.strip()]


def _jsonable(record: Mapping[str, Any]) -> dict[str, Any]:
    """Floats that JSON cannot hold (inf, nan) become strings, the rest is kept."""
    out = {}
    for key, value in record.items():
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)
        out[key] = value
    return out
