"""Round 0 of a warm-started arm: the model its private rounds start from, evaluated as the arms are (fedpub issue
45, item 2).

A warm start (Ganesh et al. 2023; PDA-DPMD's Algorithm 1 line 1) trains the seeded initial model on the public
users before any private round. Where the tuner turns the private step down to nothing, a warm arm ends where it
started, and it can then beat the public-only control (trained with its own tuned epochs) while its private rounds
taught it nothing. The judge's :class:`~fedpub.simulations.reproductions.judge.PrivateStepOn` gate compares each
warm arm with its own start: :func:`warm_start_metrics` builds that start as a run does (the run phases' warm start
on the pooled public users, the run's seed and generator purpose) and evaluates it on the test users (``eval_*``)
and the validation users (``val_*``), which the gates read.
"""

from __future__ import annotations

import torch

from fedpub.clients.public_training import PooledPublicTrainer
from fedpub.config import ExperimentConfig
from fedpub.models.seeded import model_params
from fedpub.run_phases import RunPhases
from fedpub.types import Params
from fedpub.simulations.run.evaluation import EvaluationSet, evaluate
from fedpub.simulations.run.experiment import Experiment, build_experiment

ROUND_ZERO = "@round0"
"""Appended to a warm arm's label: its start's rows (one per seed, no ε: the warm start spends none)."""


def start_of(label: str) -> str:
    """The name of ``label``'s round-0 rows."""
    return f"{label}{ROUND_ZERO}"


def evaluated(experiment: Experiment, model: torch.nn.Module, params: Params) -> dict[str, float]:
    """``params`` evaluated on the test users (``eval_*``) and on the validation users (``val_*``)."""
    test = EvaluationSet.pooled(experiment.test, experiment.eval_users.ids, experiment.device)
    val = EvaluationSet.pooled(experiment.train, experiment.validation_ids, experiment.device)
    metrics = evaluate(model, params, test, experiment.task)
    metrics |= {f"val_{k.removeprefix('eval_')}": v for k, v in evaluate(model, params, val, experiment.task).items()}
    return metrics


def warm_start_metrics(config: ExperimentConfig) -> dict[str, float]:
    """The warm start of ``config``'s run (refused when its strategy declares none), evaluated."""
    phases = RunPhases.from_config(config.strategy)
    if phases.warm_start is None:
        raise ValueError(f"{config.name}: strategy.warm_start is not set: the run has no warm start to evaluate")
    experiment = build_experiment(config)
    model = experiment.new_model()
    trainer = PooledPublicTrainer(model, experiment.public_data, experiment.public_ids, experiment.task, config.seed)
    start, _ = phases.before_rounds(model_params(model), trainer)
    return evaluated(experiment, model, start)
