"""Rows a federated reproduction computes outside its runs, kept in its folder: the public-only control's trainings
(:mod:`.public_only`) and the warm arms' round-0 starts (:mod:`.round_zero`).

A finished run is read back from its directory when a reproduction is resumed; these rows were not, so every resume
trained them again (most of the PDA-DPMD federated resume of fedpub issue 45: 46 public-only trainings and 30 warm
starts). Each row is now kept beside the resolved config that computed it (fedpub's ``dump_config``) and whatever
else it depends on (the public-only control's learning rate and epochs), and it is read back only while a config
resolved now computes the same thing — the rule by which a finished run is reused (``run_changes`` empty).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpub.atomic import write_json_atomic
from fedpub.config import ExperimentConfig, dump_config
from fedpub.simulations.reproductions.stopping import check as check_stop
from fedpub.simulations.run.session import run_changes

KEPT_FOLDER = "kept_rows"
"""Where, in a reproduction's folder, the rows are kept."""


@dataclass(frozen=True)
class RowCache:
    """Rows kept under ``folder`` (None: nothing kept, every row computed)."""

    folder: Path | None

    def metrics(self, name: str, config: ExperimentConfig, extra: Mapping[str, Any],
                compute: Callable[[], dict[str, float]]) -> dict[str, float]:
        """The row ``name`` computed by ``compute`` from ``config`` and ``extra`` (JSON values): read back when it is
        kept with the same resolved config and ``extra``, else computed and kept."""
        check_stop()  # a Ctrl-C received since the last step stops here (:mod:`.stopping`)
        if self.folder is None:
            return compute()
        path, resolved = self.folder / f"{name}.json", dump_config(config)
        if path.exists():
            kept = json.loads(path.read_text())
            if kept["extra"] == dict(extra) and not run_changes(kept["config"], resolved):
                return kept["metrics"]
        metrics = compute()
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"config": resolved, "extra": dict(extra), "metrics": metrics})
        return metrics
