"""Everything an experiment needs, built from its config before any file is written.

Both backends start here, so the same config gives the same data, model, strategy and noise.
Failures (missing data, an unreachable ε target, a budget smaller than one round) surface here,
before a run directory exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import dp_accounting
import torch

from clients.cohort_training import CohortTrainer
from clients.local_training import LocalTrainingConfig, default_device, model_params
from fedpub.config import ExperimentConfig
from fedpub.data.base import FederatedDataset
from fedpub.data.cache import CachedClients
from fedpub.data.emnist import load_emnist_split
from fedpub.data.emnist_sqlite import load_emnist_sqlite
from fedpub.data.public_split import UniformUsers, heldout_as_public, split_public
from fedpub.data.stackoverflow import TAG_COUNT_FILE, WORD_COUNT_FILE, load_word_counts, open_stackoverflow
from fedpub.data.stackoverflow_tasks import NextWordPrediction, TagPrediction, load_vocabularies
from fedpub.data.stackoverflow_writers import SyntheticStackOverflowSpec, ensure_synthetic_stackoverflow
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, ensure_synthetic_emnist
from fedpub.models import build_model
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.round_driver import RoundDriver
from fedpub.seeding import torch_generator
from fedpub.strategy import StrategyCore
from fedpub.tasks import Task, get_task
from fedpub.types import Updates
from strategies import adadps
from strategies.build import build_private_strategy, new_accountant


@dataclass(frozen=True)
class Experiment:
    config: ExperimentConfig
    train: FederatedDataset
    test: FederatedDataset
    private_ids: list[str]
    public_ids: list[str]
    public_data: FederatedDataset
    eval_ids: list[str]
    strategy: StrategyCore
    noise_multiplier: float
    planned_event: dp_accounting.DpEvent
    """The whole run's planned DP event (every round's declared releases composed)."""
    budget_epsilon: float | None
    local_training: LocalTrainingConfig
    task: Task
    device: torch.device

    def new_accountant(self) -> UserLevelAccountant:
        return new_accountant(self.config.privacy, self.strategy)

    def cohort_trainer(self, model: torch.nn.Module) -> CohortTrainer:
        """Trains a round's cohort on ``model`` (the run's resident model) as the config's client section says."""
        client = self.config.client
        return CohortTrainer(
            model, self.local_training, self.task, vectorise=client.vectorise, min_users=client.vectorise_min_users
        )

    def round_driver(self, accountant: UserLevelAccountant) -> RoundDriver:
        """The driver of this experiment's rounds over its private and public users, composing into
        ``accountant`` (a new one, or a checkpoint's) under the config's budget and failure limit."""
        return RoundDriver(
            self.strategy, accountant, private_ids=self.private_ids, public_ids=self.public_ids,
            delta=self.config.privacy.delta, budget_epsilon=self.budget_epsilon,
            stop_after_failed_rounds=self.config.stop_after_failed_rounds,
        )

    def new_model(self) -> torch.nn.Module:
        """The model with its seeded initial parameters, on the experiment's device."""
        return new_model(self.config, self.train.num_classes, self.device)


def new_model(config: ExperimentConfig, num_classes: int, device: torch.device) -> torch.nn.Module:
    """The config's model with its seeded initial parameters (seed, "model_init"), on ``device``."""
    generator = torch_generator(config.seed, "model_init")
    return build_model(config.model.name, num_classes, generator=generator).to(device)


@dataclass(frozen=True)
class FederatedData:
    """The users of an experiment: ``train`` holds the private users, ``public`` the public ones (the
    same dataset for a public fraction of the training users, StackOverflow's held-out split otherwise)."""

    train: FederatedDataset
    test: FederatedDataset
    public: FederatedDataset
    private_ids: list[str]
    public_ids: list[str]


def load_stackoverflow(config: ExperimentConfig) -> tuple[FederatedDataset, ...]:
    """The task's views over the train, test (or held-out) and held-out splits."""
    data, so = config.data, config.data.stackoverflow
    if data.source == "synthetic_stackoverflow":
        synthetic = data.synthetic_stackoverflow
        shared = {
            "min_examples": synthetic.min_examples,
            "max_examples": synthetic.max_examples,
            "topic_rank_offset": synthetic.topic_rank_offset,
        }
        ensure_synthetic_stackoverflow(
            data.path,
            SyntheticStackOverflowSpec(num_clients=synthetic.num_clients, seed=synthetic.seed, **shared),
            SyntheticStackOverflowSpec(num_clients=synthetic.test_clients, seed=synthetic.seed + 1, **shared),
            SyntheticStackOverflowSpec(num_clients=synthetic.test_clients, seed=synthetic.seed + 2, **shared),
        )
    root = Path(data.path)
    words, tags = load_vocabularies(root / WORD_COUNT_FILE, root / TAG_COUNT_FILE, tag_vocab_size=so.tag_vocab_size)
    splits = ["train", so.test_split] + (["heldout"] if data.public.pool == "heldout" else [])
    readers = [open_stackoverflow(root, split) for split in splits]
    if config.task == "so_nwp":
        return tuple(NextWordPrediction(r, words, max_elements=so.max_elements) for r in readers)
    single = config.task == "so_tag_single"
    return tuple(
        TagPrediction(r, words, tags, normalization=so.normalization, single_label=single, max_elements=so.max_elements)
        for r in readers
    )


def load_data(config: ExperimentConfig) -> FederatedData:
    """The training and test users, and which users are public (DESIGN.md §5: never in N); the training and
    public users are read through a :class:`~fedpub.data.cache.CachedClients` of ``data.cache_mb``."""
    public = config.data.public
    if config.task.startswith("so_"):
        train, test, *heldout = load_stackoverflow(config)
    else:
        train, test = load_emnist(config)
    cache_bytes = config.data.cache_mb * 2**20
    train = CachedClients(train, cache_bytes)
    if public.pool == "heldout":
        private_ids, public_ids = heldout_as_public(train.client_ids, heldout[0].client_ids)
        return FederatedData(train, test, CachedClients(heldout[0], cache_bytes), private_ids, public_ids)
    private_ids, public_ids = split_public(train.client_ids, public.fraction, public.seed)
    return FederatedData(train, test, train, private_ids, public_ids)


def load_emnist(config: ExperimentConfig) -> tuple[FederatedDataset, FederatedDataset]:
    """The training users (after DOPE's uniform construction when configured) and the test split."""
    data = config.data
    if data.source == "synthetic_emnist":
        spec = SyntheticEmnistSpec(**data.synthetic.model_dump())
        ensure_synthetic_emnist(data.path, spec)
    if data.source == "emnist_sqlite":
        train, test = load_emnist_sqlite(data.path, only_digits=data.only_digits)
    else:
        train, test = load_emnist_split(data.path, only_digits=data.only_digits)
    if data.uniform_users is not None:
        train = UniformUsers(train, data.uniform_users, seed=config.seed)
    return train, test


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: cuda was asked for, but no CUDA device is available (use auto or cpu)")
    return default_device() if name == "auto" else torch.device(name)


def side_information(config: ExperimentConfig, train: FederatedDataset) -> Updates | None:
    """AdaDPS's fixed preconditioner from StackOverflow's word counts, when the config asks for it."""
    precondition = config.strategy.precondition
    if precondition is None or precondition.source != "token_frequency":
        return None
    if config.model.name != "so_tag_logreg":
        raise ValueError(
            "strategy.precondition.source `token_frequency` preconditions the bag-of-words weight of "
            f"model so_tag_logreg, not {config.model.name}"
        )
    counts = load_word_counts(Path(config.data.path) / WORD_COUNT_FILE, train.num_features)
    params = model_params(new_model(config, train.num_classes, torch.device("cpu")))  # names and shapes
    return adadps.token_frequency_side_information(precondition, params, list(counts.values()))


def build_experiment(config: ExperimentConfig) -> Experiment:
    data = load_data(config)
    train, test, private_ids, public_ids = data.train, data.test, data.private_ids, data.public_ids
    strategy_cfg = config.strategy
    device = resolve_device(config.device)
    built = build_private_strategy(
        strategy_cfg, config.privacy, population=len(private_ids), rounds=config.rounds, seed=config.seed,
        side_information=side_information(config, train),
    )
    if built.core.public_cohort and not public_ids:
        raise ValueError(
            f"strategy `{strategy_cfg.name}` trains public users, but the data has none: set data.public"
        )
    if (strategy_cfg.warm_start or strategy_cfg.model_reuse) and not public_ids:
        raise ValueError("strategy.warm_start and strategy.model_reuse train on public users: set data.public")
    return Experiment(
        config=config,
        train=train,
        test=test,
        private_ids=private_ids,
        public_ids=public_ids,
        public_data=data.public,
        eval_ids=list(test.client_ids)[: config.data.eval_clients],
        strategy=built.core,
        noise_multiplier=built.noise_multiplier,
        planned_event=built.planned_event,
        budget_epsilon=built.budget_epsilon,
        local_training=LocalTrainingConfig(**config.client.local_training_fields()),
        task=get_task(config.task),
        device=device,
    )
