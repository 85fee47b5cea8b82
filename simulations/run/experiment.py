"""Everything an experiment needs, assembled from its config before any file is written: the users
(:mod:`fedpub.data.users`, through the dataset registry), the device (:mod:`fedpub.clients.device`), the private
strategy with its noise and planned event (:mod:`fedpub.strategies.build`) and the local training.

Both backends start here, so the same config gives the same data, model, strategy and noise.
Failures (missing data, a model that does not fit the data or the task (:mod:`~fedpub.simulations.run.preflight`,
before the noise is calibrated), an unreachable ε target, a budget smaller than one round, a tracker whose library
is not installed) surface here, before a run directory exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import dp_accounting
import torch

from fedpub.clients.cohort_training import CohortTrainer
from fedpub.clients.device import resolve_device
from fedpub.clients.local_training import LocalTrainingConfig
from fedpub.clients.payload_hooks import check_strategy_payloads
from fedpub.config import ExperimentConfig
from fedpub.data.base import FederatedDataset, Splits
from fedpub.data.users import EvaluationUsers, FederatedData, evaluation_users, load_data
from fedpub.models.seeded import new_model
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.randomness import PrivacyRandomness, resolve_randomness
from fedpub.round_driver import RoundDriver
from fedpub.strategy import StrategyCore
from fedpub.tasks import Task, get_task
from fedpub.strategies.build import build_experiment_strategy, new_accountant
from fedpub.simulations.run.preflight import preflight
from fedpub.simulations.run.tracking import check_trackers


@dataclass(frozen=True)
class Experiment:
    config: ExperimentConfig
    train: FederatedDataset
    test: FederatedDataset
    private_ids: list[str]
    public_ids: list[str]
    public_data: FederatedDataset
    validation_ids: list[str]
    """Training users held out of N (``data.validation``): the model is evaluated on their training examples."""
    evaluation_ids: list[str]
    """Training users held out of N (``data.evaluation``) whose test examples evaluate the model (may be empty)."""
    eval_users: EvaluationUsers
    strategy: StrategyCore
    noise_multiplier: float
    planned_event: dp_accounting.DpEvent
    """The whole run's planned DP event (every round's declared releases composed)."""
    budget_epsilon: float | None
    local_training: LocalTrainingConfig
    task: Task
    device: torch.device
    randomness: PrivacyRandomness
    """The privacy seed of the noise and cohorts, and whether it is secret (never written to a released file)."""
    diagnostics: bool
    """Whether the run writes diagnostics.jsonl (statistics of private users that DP does not cover)."""
    core_with_seed: Callable[[int], StrategyCore]

    def with_randomness(self, randomness: PrivacyRandomness) -> Experiment:
        """This experiment with its noise and cohorts drawn from ``randomness`` (a resumed run's, from its
        checkpoint)."""
        if randomness == self.randomness:
            return self
        return replace(self, randomness=randomness, strategy=self.core_with_seed(randomness.seed))

    def new_accountant(self) -> UserLevelAccountant:
        return new_accountant(self.config.privacy, self.strategy.sampling)

    def cohort_trainer(
        self,
        model: torch.nn.Module,
        *,
        stored: Mapping[str, Any] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> CohortTrainer:
        """Trains a round's cohort on ``model`` (the run's resident model) as the config's client section says;
        ``stored``: path choices already made (a resumed run's ``paths.json``); ``log`` receives each new choice."""
        client = self.config.client
        return CohortTrainer(
            model, self.local_training, self.task, path=client.path, min_users=client.vectorise_min_users,
            stored=stored, log=log,
        )

    def round_driver(self, accountant: UserLevelAccountant) -> RoundDriver:
        """The driver of this experiment's rounds over its private and public users, composing into
        ``accountant`` (a new one, or a checkpoint's) under the config's budget and failure limit."""
        return RoundDriver(
            self.strategy, accountant, private_ids=self.private_ids, public_ids=self.public_ids,
            delta=self.config.privacy.delta, budget_epsilon=self.budget_epsilon, planned_rounds=self.config.rounds,
            noise_multiplier=self.noise_multiplier, stop_after_failed_rounds=self.config.stop_after_failed_rounds,
        )

    def new_model(self) -> torch.nn.Module:
        """The model with its seeded initial parameters, on the experiment's device."""
        return new_model(self.config, self.train.num_classes, self.device)


@dataclass(frozen=True)
class CheckedData:
    """A config's users, its task and whose examples it evaluates on, with the model's preflight passed."""

    data: FederatedData
    task: Task
    eval_users: EvaluationUsers


def checked_data(
    config: ExperimentConfig,
    splits: Splits | None = None,
    node_users: tuple[list[str], list[str] | None] | None = None,
) -> CheckedData:
    """What every check of a config's data needs, before any noise: its users (``splits``, ``node_users``: as
    :func:`build_experiment` takes them), whose examples are evaluated, and the preflight of the model on them. A
    run's build and ``fedpub data verify --config`` both go through here, so they refuse the same things."""
    data = load_data(config, splits)
    if node_users is not None:
        private, public = node_users
        data = replace(data, private_ids=list(private), public_ids=data.public_ids if public is None else list(public))
    task = get_task(config.task)
    eval_users = evaluation_users(data, config.data.eval_users, config.data.eval_clients)
    preflight(config, data.train, task)
    return CheckedData(data, task, eval_users)


def build_experiment(
    config: ExperimentConfig,
    *,
    deployment: bool = False,
    node_users: tuple[list[str], list[str] | None] | None = None,
    splits: Splits | None = None,
) -> Experiment:
    """The experiment ``config`` describes: its users, its device, its private strategy, its local training.
    ``deployment`` (``flwr run``): ``privacy.randomness`` and ``privacy.diagnostics`` ``auto`` mean a secret privacy
    seed and no diagnostics (in a simulation: reproducible, with diagnostics). ``node_users``: (private, public or
    None) users found as nodes (``flower.private_users: nodes``), replacing the data's (None public: the data's,
    the server's pool); the strategy is built for their number, and refused when it sends clients a payload local
training cannot apply (:mod:`fedpub.clients.payload_hooks`). A configured tracker whose library is missing is
    refused first (:func:`~fedpub.simulations.run.tracking.check_trackers`), then a model that cannot train on the
    data (:func:`~fedpub.simulations.run.preflight.preflight`), before any noise is calibrated or drawn. ``splits``:
    the users of ``data.source: python``, given from Python."""
    check_trackers(config.tracking)
    checked = checked_data(config, splits, node_users)
    data, task, eval_users = checked.data, checked.task, checked.eval_users
    device = resolve_device(config.device)
    randomness = resolve_randomness(
        config.privacy.randomness, deployment=deployment, config_seed=config.seed, run_name=config.name,
        draws_key=config.privacy.draws_key,
    )
    built = build_experiment_strategy(config, data, randomness=randomness)
    check_strategy_payloads(built.core)
    return Experiment(
        config=config,
        train=data.train,
        test=data.test,
        private_ids=data.private_ids,
        public_ids=data.public_ids,
        public_data=data.public,
        validation_ids=data.validation_ids,
        evaluation_ids=data.evaluation_ids,
        eval_users=eval_users,
        strategy=built.core,
        noise_multiplier=built.noise_multiplier,
        planned_event=built.planned_event,
        budget_epsilon=built.budget_epsilon,
        local_training=LocalTrainingConfig(**config.client.local_training_fields()),
        task=task,
        device=device,
        randomness=randomness,
        diagnostics=config.privacy.diagnostics == "on" or (config.privacy.diagnostics == "auto" and not deployment),
        core_with_seed=built.core_with_seed,
    )
