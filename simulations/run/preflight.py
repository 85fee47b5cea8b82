"""The preflight of a run: what can be checked about the model, the task and the data is checked before any noise
is drawn (before the noise calibration, the budget check and round 0), so that a run that cannot train spends no ε
and writes no run directory, and ``fedpub run --dry-run`` says so.

It builds the config's model as every backend does (its factory's ``model.kwargs`` checked against its signature
first), on the CPU, and runs one forward and one loss of the task on a small batch of synthetic examples: zeros
shaped and typed like one user's ``x`` and ``y`` (never the user's values). The labels of the first few users (their
least and greatest, with the classes the data declares) then go through the task's loss against the model's
outputs: a model with fewer outputs than the labels reach is refused here instead of failing in every round.
Bounded work: :data:`SAMPLE_USERS` users read, a batch of at most :data:`BATCH` examples. Errors name the field
(``model.factory``, ``model.name``, ``task``, ``data``) and shapes, dtypes or counts, never an example's values.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from fedpub.config import ConfigError, ExperimentConfig
from fedpub.data.base import FederatedDataset
from fedpub.models.seeded import new_model
from fedpub.tasks import Task

SAMPLE_USERS = 4
"""How many users (the first by id) the preflight reads: one gives the batch's shapes, all give the label range."""

BATCH = 8
"""The most synthetic examples the preflight's forward runs on."""

_INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


@dataclass(frozen=True)
class _Sample:
    """What the preflight learns from the first users: shapes and dtypes, and the labels' range (integer labels)."""

    x: torch.Tensor
    """A batch of zeros shaped and typed like one user's inputs."""
    y: torch.Tensor
    """A batch of zeros shaped and typed like that user's labels."""
    users: int
    """How many users the label range covers."""
    least: int
    """The least label of those users (0 for labels that are not integers)."""
    greatest: int
    """The greatest label of those users (0 for labels that are not integers)."""


def _sample(data: FederatedDataset) -> _Sample | None:
    """The batch shapes and the label range of the first :data:`SAMPLE_USERS` users; None when none of them has
    an example (nothing to shape a batch from)."""
    users = [data.client_data(c) for c in itertools.islice(data.client_ids, SAMPLE_USERS)]
    shaped = [u for u in users if len(u) > 0]
    if not shaped:
        return None
    first = shaped[0]
    n = min(BATCH, len(first))
    x = torch.zeros((n, *first.x.shape[1:]), dtype=first.x.dtype)
    y = torch.zeros((n, *first.y.shape[1:]), dtype=first.y.dtype)
    if first.y.dtype not in _INTEGERS:
        return _Sample(x, y, len(users), 0, 0)
    least = min(int(u.y.min()) for u in shaped)
    greatest = max(int(u.y.max()) for u in shaped)
    return _Sample(x, y, len(users), least, greatest)


def _why(error: Exception) -> str:
    """The exception's type and first line (raised on synthetic zeros: it holds shapes, never a user's values)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _fails(loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], outputs: torch.Tensor,
           y: torch.Tensor) -> Exception | None:
    try:
        loss(outputs, y)
    except Exception as error:  # the task's loss is user code: whatever it raises, the run could not train
        return error
    return None


def preflight(config: ExperimentConfig, data: FederatedDataset, task: Task) -> None:
    """Refuse, with a :class:`~fedpub.config.ConfigError` naming the field, a model that cannot train on ``data``
    under ``task``: factory arguments its signature refuses, a forward that fails on the data's shapes and dtypes,
    outputs the task's loss refuses, fewer outputs than the labels (or the data's declared classes) reach, labels
    below 0. Reads :data:`SAMPLE_USERS` users of ``data``; leaves torch's RNG as it was."""
    model_field = (f"model.factory {config.model.factory!r}" if config.model.factory is not None
                   else f"model.name {config.model.name!r}")
    task_field = f"task {config.task!r}" if isinstance(config.task, str) else "task.loss"
    with torch.random.fork_rng(devices=[]):
        model = new_model(config, data.num_classes, torch.device("cpu"))
        sample = _sample(data)
        if sample is None:
            return
        batch = f"x {tuple(sample.x.shape)} {sample.x.dtype}"
        model.eval()
        with torch.no_grad():
            try:
                outputs = model(sample.x)
            except Exception as error:  # the model is user code: whatever it raises, the run could not train
                raise ConfigError(f"{model_field}: the model fails on a batch shaped like the data's ({batch}): "
                                  f"{_why(error)}; make the model take inputs of this shape and dtype") from None
            if not isinstance(outputs, torch.Tensor):
                raise ConfigError(f"{model_field}: the model returns a {type(outputs).__name__} on a batch shaped like "
                                  f"the data's ({batch}); {task_field} takes one tensor of outputs")
            shapes = f"outputs {tuple(outputs.shape)} on {batch}, labels y {tuple(sample.y.shape)} {sample.y.dtype}"
            error = _fails(task.loss, outputs, sample.y)
            if error is not None:
                raise ConfigError(f"{model_field}: its outputs do not fit {task_field} ({shapes}): {_why(error)}")
            if sample.y.dtype in _INTEGERS:  # class indices (multi-hot or other float targets have no range)
                _check_label_range(config, data, task, outputs, sample, model_field, task_field)


def _check_label_range(config: ExperimentConfig, data: FederatedDataset, task: Task, outputs: torch.Tensor,
                       sample: _Sample, model_field: str, task_field: str) -> None:
    """The task's loss on the model's outputs with every label at the greatest the first users reach (or the data's
    declared classes) and at their least: a loss that refuses either is named with the sizes."""
    declared = data.num_classes - 1
    greatest = max(sample.greatest, declared)
    outputs_size = outputs.shape[-1] if outputs.ndim else 1
    if greatest > 0 and _fails(task.loss, outputs, torch.full_like(sample.y, greatest)) is not None:
        reach = (f"the data declares {data.num_classes} classes" if declared >= sample.greatest else
                 f"the labels of the first {sample.users} users reach at least {greatest} (at least {greatest + 1} "
                 "classes)")
        if config.model.factory is None:
            raise ConfigError(f"data: {reach}, but {model_field} has {outputs_size} outputs, which {task_field} "
                              f"refuses: labels must lie below the classes the data declares ({data.num_classes})")
        raise ConfigError(f"{model_field}: the model has {outputs_size} outputs (outputs {tuple(outputs.shape)}) but "
                          f"{reach}, which {task_field} refuses: give the model at least {greatest + 1} outputs "
                          "(model.kwargs)")
    if sample.least < 0 and _fails(task.loss, outputs, torch.full_like(sample.y, sample.least)) is not None:
        missing = (" (the smallest integer: missing values, e.g. a label column with nulls)"
                   if sample.least == torch.iinfo(sample.y.dtype).min else "")
        raise ConfigError(f"data: the labels of the first {sample.users} users include negative values{missing}, "
                          f"which {task_field} refuses: labels are class indices from 0; drop or fill such examples")
