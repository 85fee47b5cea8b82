"""The users an experiment config's ``data`` section names: its readers opened, the synthetic files written first
when the source is synthetic, and the private/public split (DESIGN.md §5: public users are never in N).

Every backend and every node loads its users here, so the same config gives the same users everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedpub.config import ExperimentConfig
from fedpub.data.base import FederatedDataset
from fedpub.data.cache import CachedClients
from fedpub.data.emnist import load_emnist_split
from fedpub.data.emnist_sqlite import load_emnist_sqlite
from fedpub.data.public_split import UniformUsers, heldout_as_public, split_public
from fedpub.data.stackoverflow import TAG_COUNT_FILE, WORD_COUNT_FILE, StackOverflowReader, open_stackoverflow
from fedpub.data.stackoverflow_tasks import NextWordPrediction, TagPrediction, load_vocabularies
from fedpub.data.stackoverflow_writers import SyntheticStackOverflowSpec, ensure_synthetic_stackoverflow
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, ensure_synthetic_emnist


@dataclass(frozen=True)
class FederatedData:
    """The users of an experiment: ``train`` holds the private users, ``public`` the public ones (the
    same dataset for a public fraction of the training users, StackOverflow's held-out split otherwise)."""

    train: FederatedDataset
    test: FederatedDataset
    public: FederatedDataset
    private_ids: list[str]
    public_ids: list[str]


def load_data(config: ExperimentConfig) -> FederatedData:
    """The training and test users, and which users are public (DESIGN.md §5: never in N); the training and
    public users are read through a :class:`~fedpub.data.cache.CachedClients` of ``data.cache_mb``. With
    ``flower.private_users: nodes`` the private users are nodes, not data: every user of the server's files is
    public (its server-held pool) and ``private_ids`` is empty."""
    public = config.data.public
    if config.task.startswith("so_"):
        train, test, *heldout = load_stackoverflow(config)
    else:
        train, test = load_emnist(config)
    cache_bytes = config.data.cache_mb * 2**20
    train = CachedClients(train, cache_bytes)
    nodes = config.flower.private_users == "nodes"  # the private users are nodes: the server's users are public
    if public.pool == "heldout":
        private_ids, public_ids = heldout_as_public(train.client_ids, heldout[0].client_ids)
        private_ids = [] if nodes else private_ids
        return FederatedData(train, test, CachedClients(heldout[0], cache_bytes), private_ids, public_ids)
    if nodes:
        return FederatedData(train, test, train, [], list(train.client_ids))
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
    splits = ["train", so.test_split] + (["heldout"] if data.public.pool == "heldout" else [])
    vocabularies = load_vocabularies(
        root / WORD_COUNT_FILE, root / TAG_COUNT_FILE, tag_vocab_size=so.tag_vocab_size
    )
    return tuple(stackoverflow_view(config, open_stackoverflow(root, split), vocabularies) for split in splits)


def stackoverflow_view(
    config: ExperimentConfig,
    reader: StackOverflowReader,
    vocabularies: Path | tuple[list[str], list[str]],
    *,
    client_ids: list[str] | None = None,
) -> TagPrediction | NextWordPrediction:
    """The task view of ``config`` over ``reader`` (restricted to ``client_ids``), with the (word, tag)
    vocabularies, or those of the two count files in the directory ``vocabularies``."""
    so = config.data.stackoverflow
    if isinstance(vocabularies, Path):
        vocabularies = load_vocabularies(
            vocabularies / WORD_COUNT_FILE, vocabularies / TAG_COUNT_FILE, tag_vocab_size=so.tag_vocab_size
        )
    words, tags = vocabularies
    if config.task == "so_nwp":
        return NextWordPrediction(reader, words, max_elements=so.max_elements, client_ids=client_ids)
    return TagPrediction(
        reader, words, tags, normalization=so.normalization, single_label=config.task == "so_tag_single",
        max_elements=so.max_elements, client_ids=client_ids,
    )
