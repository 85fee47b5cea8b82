"""fedpub's Python API: build and run an experiment from a script or a notebook (docs/guides/python-api.md).

::

    import fedpub

    config = fedpub.parse_config({"rounds": 10, "strategy": {"target_epsilon": 4.0}})  # or fedpub.load_config(path)
    result = fedpub.run(config)                    # into <output_dir>/<name>/, resumed like `fedpub run`
    result = fedpub.run(config, output_dir=None)   # nothing kept on disk
    result.model, result.metrics, result.epsilon

    # your own model, task and users (docs/own-model-and-data.md):
    result = fedpub.run(config, model=make_model, loss=per_example_loss, metrics=[accuracy], data={"u1": (x, y)})

The names are reached through :mod:`fedpub`'s lazy facade (``fedpub.run`` imports this module on first use), so
``import fedpub`` stays as light as the core. A run is the same as ``fedpub run``'s: the same engine or Flower
simulation, the same files, the same resume; :func:`run` returns what the files hold, in memory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedpub.clients.local_training import load_params_
from fedpub.config import ExperimentConfig, load_config, parse_config
from fedpub.strict_yaml import load_yaml
from fedpub.data.base import Splits
from fedpub.data.python_users import PythonUsers, UserExamples
from fedpub.data.spec import resolve
from fedpub.types import Params
from fedpub.simulations.run.backends import Backend, check_backend, check_config_for, run_experiment
from fedpub.simulations.run.experiment import Experiment, build_experiment

KEEP = "config"
"""``output_dir`` default of :func:`run`: the config's own ``output_dir``."""


@dataclass(frozen=True)
class Result:
    """A finished (or budget-stopped) run: the released model and what its run directory holds."""

    model: torch.nn.Module
    """The released model (after model reuse, if any), its parameters loaded, on the experiment's device."""
    params: Params
    metrics: list[dict[str, Any]]
    """``metrics.jsonl``'s records: what DP covers, one per round."""
    diagnostics: list[dict[str, Any]]
    """``diagnostics.jsonl``'s records (un-noised statistics of private users; empty when diagnostics are off)."""
    final_metrics: dict[str, float]
    epsilon: float
    delta: float
    rounds_done: int
    stopped_by_budget: bool
    run_dir: Path | None
    """Where the files are; None when the run kept nothing on disk."""


def as_config(config: ExperimentConfig | Mapping[str, Any] | str | Path) -> ExperimentConfig:
    """``config`` validated: a config object as is, a mapping (as read from YAML) or a YAML file's path. Raises
    :class:`~fedpub.config.ConfigError` naming every bad field."""
    if isinstance(config, ExperimentConfig):
        return config
    if isinstance(config, Mapping):
        return parse_config(dict(config))
    if isinstance(config, (str, Path)):
        return load_config(Path(config))
    raise TypeError(f"config must be an ExperimentConfig, a mapping or a YAML path, got {type(config).__name__}")


def build(config: ExperimentConfig | Mapping[str, Any] | str | Path) -> Experiment:
    """The experiment ``config`` describes (data, model, calibrated strategy, device), before anything is
    written: its ``noise_multiplier``, ``strategy.population``, ``planned_event`` … can be inspected."""
    return build_experiment(as_config(config))


def reference(fn: Callable[..., Any], argument: str) -> str:
    """The ``"module:qualname"`` of ``fn`` (what the run's config.yaml records for a callable given from Python);
    a callable that the reference does not give back (a lambda, a closure, a bound method) is refused."""
    ref = f"{getattr(fn, '__module__', None)}:{getattr(fn, '__qualname__', None)}"
    try:
        same = resolve(ref) is fn
    except (ImportError, AttributeError, ValueError):
        same = False
    if not same:
        raise ValueError(f"fedpub.run({argument}=...) takes a function or class defined at a module's top level "
                         f"(its 'module:name' goes into the run's config.yaml), got {fn!r}")
    return ref


def with_own(
    config: ExperimentConfig | Mapping[str, Any] | str | Path, model: Callable[..., torch.nn.Module] | None,
    loss: Callable[..., torch.Tensor] | None, metrics: Sequence[Callable[..., torch.Tensor]] | None,
) -> ExperimentConfig:
    """``config`` validated with ``model`` as its ``model.factory`` (called with the config's ``model.kwargs``) and
    ``loss`` and ``metrics`` as its task (both or neither)."""
    if (loss is None) != (metrics is None):
        raise ValueError("fedpub.run(loss=..., metrics=...): give both (a task is a loss and its metrics) or neither")
    if model is None and loss is None:
        return as_config(config)
    if isinstance(config, ExperimentConfig):
        raw: dict[str, Any] = config.model_dump(mode="json")
    elif isinstance(config, (str, Path)):
        raw = load_yaml(Path(config).read_bytes()) or {}  # duplicate keys refused, as load_config refuses them
    else:
        raw = dict(config)
    if model is not None:
        section = dict(raw.get("model") or {})
        raw["model"] = {"factory": reference(model, "model"), "kwargs": section.get("kwargs") or {}}
    if loss is not None and metrics is not None:
        raw["task"] = {"loss": reference(loss, "loss"), "metrics": [reference(m, "metrics") for m in metrics]}
    return parse_config(raw)


def run(
    config: ExperimentConfig | Mapping[str, Any] | str | Path,
    *,
    output_dir: str | Path | None = KEEP,
    backend: Backend = "inprocess",
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    model: Callable[..., torch.nn.Module] | None = None,
    loss: Callable[..., torch.Tensor] | None = None,
    metrics: Sequence[Callable[..., torch.Tensor]] | None = None,
    data: UserExamples | Mapping[Any, tuple[Any, Any]] | None = None,
) -> Result:
    """Run ``config`` (resuming a checkpointed run of the same name unless ``fresh``) and return its results.
    ``output_dir``: where ``<name>/`` is written (default: the config's; ``None``: a temporary directory removed
    afterwards); ``backend``: ``inprocess``, ``flower`` or ``secagg``; ``on_round`` receives each round's record.
    Your own parts: ``model``, a model factory (the config's ``model.factory``); ``loss`` and ``metrics``,
    per-example callables (the config's ``task: {loss, metrics}``); ``data``, the users
    (:class:`~fedpub.data.python_users.UserExamples` or ``{user_id: (x, y)}``, ``data.source: python``; in process)."""
    cfg = with_own(config, model, loss, metrics)
    check_backend(backend)
    splits = None
    if data is not None:
        if backend != "inprocess":
            raise ValueError(f"fedpub.run(data=...) runs in process: backend {backend}'s nodes read the data the "
                             "config names (write the users to a table: data.source table)")
        users = PythonUsers(data)
        splits = Splits(users, users)
    if output_dir is None:
        with tempfile.TemporaryDirectory(prefix="fedpub-") as scratch:
            return _run(cfg.model_copy(update={"output_dir": Path(scratch)}), backend, fresh, on_round, splits,
                        keep=False)
    if output_dir != KEEP:
        cfg = cfg.model_copy(update={"output_dir": Path(output_dir)})
    return _run(cfg, backend, fresh, on_round, splits, keep=True)


def _run(
    cfg: ExperimentConfig, backend: Backend, fresh: bool, on_round: Callable[[dict[str, Any]], None] | None,
    splits: Splits | None, *, keep: bool,
) -> Result:
    check_config_for(backend, cfg)
    experiment = build_experiment(cfg, splits=splits)
    result = run_experiment(experiment, backend, fresh=fresh, on_round=on_round)
    model = experiment.new_model()
    load_params_(model, result.params)
    return Result(
        model=model,
        params=result.params,
        metrics=result.run_dir.read_metrics(),
        diagnostics=result.run_dir.read_diagnostics(),
        final_metrics=dict(result.final_metrics),
        epsilon=result.epsilon,
        delta=result.delta,
        rounds_done=result.rounds_done,
        stopped_by_budget=result.stopped_by_budget,
        run_dir=result.run_dir.root if keep else None,
    )
