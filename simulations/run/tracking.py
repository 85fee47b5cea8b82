"""Experiment tracking: what a run releases also goes to TensorBoard, Weights & Biases or MLflow (the config's
``tracking`` section, off by default; docs/guides/tracking.md).

A tracker receives only what the run releases: the resolved config (less ``tracking``) as hyperparameters, each
``metrics.jsonl`` record at its round, and the final figures (the released model's final evaluation, ε, δ).
Diagnostics never reach a tracker: they are about private users and not covered by DP (docs/privacy.md); W&B's
console capture is off for the same reason (the run's log may name users whose training failed). Nor does the
time: a round's duration grows with its realised cohort size, which DP does not cover, so TensorBoard's events and
MLflow's metrics are stamped with their round (as seconds, or milliseconds, after the epoch), never the clock. W&B
stamps each record itself when it arrives; the run says so when it starts (a labelled diagnostic, as the docs do).

The libraries are optional (``pip install 'fedpub[tracking]'``): :func:`check_trackers` refuses a configured
tracker whose library is missing when the experiment is built, before any training. A tracker that fails during a
run (its server unreachable, say) is reported once, as a warning, and dropped: the run goes on and its directory
stays complete. A resumed run continues the same W&B and MLflow runs, whose ids are kept in the run directory's
``tracking.json``; its TensorBoard events from the rounds it redoes are purged.
"""

from __future__ import annotations

import importlib
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fedpub.atomic import write_text_atomic
from fedpub.config import ConfigError, ExperimentConfig, MlflowConfig, TrackingConfig, WandbConfig
from fedpub.simulations.run.run_dir import RunDirectory

INSTALL = "pip install 'fedpub[tracking]'"

Values = Mapping[str, float | str]
"""A released record's values (less its round) or the final figures: numbers, and labels such as
``evaluated_on``."""


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker is started with."""

    name: str
    root: Path
    """The run directory."""
    config: dict[str, Any]
    """The resolved config less ``tracking``, as JSON values."""
    first_round: int
    """The round the run goes on from: 0, or a resumed run's checkpointed rounds."""

    def params(self) -> dict[str, str | int | float | bool | None]:
        """The config flattened to dotted keys (``strategy.clip_norm``); a list becomes its JSON text."""
        return _flatten(self.config)


class Tracker(Protocol):
    field: str
    """The config field that asks for the tracker (``tracking.wandb``), named in its messages."""
    module: str
    """The module its library installs, imported to check that it is there."""
    resume_key: str | None
    """Under which key ``tracking.json`` keeps its run's id (None: no id to keep)."""

    def start(self, run: TrackedRun, resume_id: str | None) -> str | None:
        """Open the tracker's run (``resume_id``'s, when the run directory kept one); return its id."""

    def log(self, step: int, values: Values) -> None:
        """A released record's values at its round."""

    def finish(self, final: Values | None) -> None:
        """Close the run; ``final``: the final figures (already logged at the last round), None when the run stopped
        before its end."""


def _numbers(values: Values) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if not isinstance(v, str)}


def _labels(values: Values) -> dict[str, str]:
    return {k: v for k, v in values.items() if isinstance(v, str)}


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, list) else value
    return flat


class TensorBoardTracker:
    """Event files in ``<run dir>/tensorboard/`` (``torch.utils.tensorboard``): each number a scalar, each label a
    text, at the record's round; the config as hyperparameters (the final figures their metrics) when the run
    finishes."""

    field, module, resume_key = "tracking.tensorboard", "tensorboard", None

    def start(self, run: TrackedRun, resume_id: str | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._run = run
        # events at the rounds a resumed run redoes (past its checkpoint) are hidden from TensorBoard
        self._writer = SummaryWriter(str(run.root / "tensorboard"), purge_step=run.first_round)

    def log(self, step: int, values: Values) -> None:
        for key, value in _numbers(values).items():
            self._writer.add_scalar(key, value, step, walltime=float(step))  # the round, never the clock
        for key, label in _labels(values).items():
            self._writer.add_text(key, label, step, walltime=float(step))
        self._writer.flush()

    def finish(self, final: Values | None) -> None:
        from torch.utils.tensorboard.summary import hparams

        if final is not None:  # the hyperparameters, with the final figures as their metrics, in this run's events
            for summary in hparams(self._run.params(), _numbers(final)):
                self._writer.file_writer.add_summary(summary, walltime=0.0)
        self._writer.close()


class TrackerTiming(UserWarning):
    """A tracker learns when each round's record arrives: a diagnostic outside the DP guarantee."""


WANDB_TIMES = ("tracking.wandb: W&B stamps each round's record with the time it arrives, and a round's duration "
               "grows with its realised cohort size, which DP does not cover: the times W&B shows are a diagnostic "
               "outside the DP guarantee (TensorBoard and MLflow are stamped with the round instead)")


class WandbTracker:
    """A Weights & Biases run named after the fedpub run, its files in ``<run dir>/wandb/``."""

    field, module = "tracking.wandb", "wandb"

    def __init__(self, section: WandbConfig) -> None:
        self._section = section
        self.resume_key = f"wandb {section.entity or ''}/{section.project}"

    def start(self, run: TrackedRun, resume_id: str | None) -> str:
        import wandb

        section = self._section
        warnings.warn(WANDB_TIMES, TrackerTiming, stacklevel=2)
        self._run = wandb.init(
            project=section.project, entity=section.entity, mode=section.mode, tags=list(section.tags),
            dir=run.root, name=run.name, config=run.config, id=resume_id, resume="allow",
            reinit="create_new",  # one W&B run per fedpub run, also when a process runs several (a sweep)
            settings=wandb.Settings(console="off"),  # the log is not released: it may name failing users
        )
        return self._run.id

    def log(self, step: int, values: Values) -> None:
        self._run.log(dict(values), step=step)

    def finish(self, final: Values | None) -> None:
        self._run.finish(exit_code=0 if final is not None else 1)


class MlflowTracker:
    """An MLflow run named after the fedpub run: the config as params, each number a metric at its round, each
    label a tag (through :class:`mlflow.tracking.MlflowClient`: no process-wide active run)."""

    field, module = "tracking.mlflow", "mlflow"

    def __init__(self, section: MlflowConfig) -> None:
        self._section = section
        self.resume_key = f"mlflow {section.tracking_uri or '(default)'} {section.experiment}"

    def start(self, run: TrackedRun, resume_id: str | None) -> str:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self._section.tracking_uri)
        if resume_id is None:
            experiment = client.get_experiment_by_name(self._section.experiment)
            experiment_id = (
                client.create_experiment(self._section.experiment) if experiment is None else experiment.experiment_id
            )
            resume_id = client.create_run(experiment_id, run_name=run.name).info.run_id
        else:
            client.update_run(resume_id, status="RUNNING")
        client.log_batch(resume_id, params=[Param(k, str(v)) for k, v in run.params().items()])
        self._client, self._run_id = client, resume_id
        return resume_id

    def log(self, step: int, values: Values) -> None:
        from mlflow.entities import Metric, RunTag

        self._client.log_batch(
            self._run_id,  # each metric stamped with its round (ms after the epoch), never the clock
            metrics=[Metric(k, v, step, step) for k, v in _numbers(values).items()],
            tags=[RunTag(k, v) for k, v in _labels(values).items()],
        )

    def finish(self, final: Values | None) -> None:
        self._client.set_terminated(self._run_id, "FINISHED" if final is not None else "KILLED")


def configured_trackers(config: TrackingConfig) -> list[Tracker]:
    """The trackers ``config`` asks for (none started)."""
    trackers: list[Tracker] = [TensorBoardTracker()] if config.tensorboard else []
    if config.wandb is not None:
        trackers.append(WandbTracker(config.wandb))
    if config.mlflow is not None:
        trackers.append(MlflowTracker(config.mlflow))
    return trackers


def check_trackers(config: TrackingConfig) -> None:
    """Raise :class:`~fedpub.config.ConfigError` naming the field and the install command when a configured
    tracker's library cannot be imported."""
    for tracker in configured_trackers(config):
        try:
            importlib.import_module(tracker.module)
        except ImportError:
            raise ConfigError(f"{tracker.field} needs the {tracker.module} package: {INSTALL}") from None


class Trackers:
    """The trackers of one run: each call goes to every tracker still running; a tracker whose call raises is
    reported once (a warning) and dropped, so the run goes on without it."""

    def __init__(self, config: TrackingConfig) -> None:
        self._waiting = configured_trackers(config)
        self._running: list[Tracker] = []

    def start(self, run_dir: RunDirectory, config: ExperimentConfig, first_round: int) -> None:
        """Start the trackers for the run in ``run_dir`` (which exists), going on from ``first_round``; the ids of
        their runs are kept in its ``tracking.json``."""
        run = TrackedRun(config.name, run_dir.root, config.model_dump(mode="json", exclude={"tracking"}), first_round)
        path = run_dir.tracking_path
        ids: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        for tracker in self._waiting:
            try:
                run_id = tracker.start(run, ids.get(tracker.resume_key) if tracker.resume_key else None)
            except Exception as error:  # noqa: BLE001 — a tracker must not stop the run
                _dropped(tracker, error)
                continue
            self._running.append(tracker)
            if tracker.resume_key is not None and run_id is not None:
                ids[tracker.resume_key] = run_id
        self._waiting = []
        if ids:
            write_text_atomic(path, json.dumps(ids, indent=1))

    def log(self, record: Mapping[str, Any]) -> None:
        """A released metrics record (never a diagnostics record), at its round."""
        values = {k: v for k, v in record.items() if k != "round"}
        self._call("log", record["round"], values)

    def finish(self, step: int, final: Values) -> None:
        """Log ``final`` (the final figures) at ``step`` (the last round), then close every tracker."""
        self._call("log", step, final)
        self._call("finish", final)
        self._running = []

    def close(self) -> None:
        """Close the trackers still open: the run stopped before its end."""
        self._call("finish", None)
        self._running = []

    def _call(self, method: str, *args: Any) -> None:
        for tracker in list(self._running):
            try:
                getattr(tracker, method)(*args)
            except Exception as error:  # noqa: BLE001 — a tracker must not stop the run
                self._running.remove(tracker)
                _dropped(tracker, error)


def _dropped(tracker: Tracker, error: Exception) -> None:
    warnings.warn(
        f"{tracker.field} failed ({type(error).__name__}: {error}); the run goes on without it (its directory holds "
        "every released record)",
        RuntimeWarning,
        stacklevel=3,
    )
