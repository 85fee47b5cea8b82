"""How a run's rounds are shown: a progress bar on a terminal; elsewhere (``| tee``, nohup, a batch scheduler's log)
one plain line per evaluation round (round, headline metric, ε, elapsed time), written as it happens."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


class RoundDisplay:
    """``on_round`` (a round's record), ``on_resume`` (the round a resumed run starts from) and ``log`` (engine
    lines) for a run of ``total`` rounds whose headline metric is ``metric``; use it as a context manager."""

    def __init__(self, console: Console, total: int, metric: str, label: str = "round") -> None:
        self.console, self.total, self.metric, self.label = console, total, metric, label
        self.terminal = console.is_terminal
        self._status = {"metric": "–", "epsilon": "–"}
        self._started = time.monotonic()
        self._progress: Progress | None = None
        if self.terminal:
            self._progress = Progress(
                TextColumn(f"{label} {{task.completed}}/{{task.total}}"), BarColumn(),
                TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn(), console=console,
            )
            self._task = self._progress.add_task("rounds", total=total, status="")

    def __enter__(self) -> RoundDisplay:
        self._started = time.monotonic()
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()

    def log(self, line: str) -> None:
        self.console.print(line, highlight=False, markup=False, soft_wrap=True)

    def on_resume(self, rounds_done: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=rounds_done)

    def on_round(self, record: dict[str, Any]) -> None:
        """Move the bar on (the headline metric, ε and the realised cohort, a diagnostic the server sees: shown on
        its console, never written to a released file); off a terminal, print a line on evaluation rounds."""
        key = f"eval_{self.metric}"
        if key in record:
            self._status["metric"] = f"{record[key]:.4f}"
        if "epsilon" in record:
            self._status["epsilon"] = f"{float(record['epsilon']):.4g}"
        done = record["round"] + 1
        if self._progress is not None:
            cohort = record.get("diagnostics", {}).get("cohort_sampled")
            self._progress.update(
                self._task, completed=done,
                status=f"{self.metric} {self._status['metric']}  ε {self._status['epsilon']}"
                + ("" if cohort is None else f"  cohort {int(cohort)}"),
            )
        elif key in record:
            self.log(f"{self.label} {done}/{self.total}  {self.metric} {self._status['metric']}  "
                     f"ε {self._status['epsilon']}  elapsed {_clock(time.monotonic() - self._started)}")
