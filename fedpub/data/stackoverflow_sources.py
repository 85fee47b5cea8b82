"""How a config's ``data`` section opens federated StackOverflow (:mod:`fedpub.data.stackoverflow_dataset`): the
task's views (:mod:`fedpub.data.stackoverflow_tasks`) over TFF's files or the look-alike files written first, the
vocabularies from the two count files, and the word counts AdaDPS's token-frequency preconditioner divides by.
"""

from __future__ import annotations

from pathlib import Path

from fedpub.config import ExperimentConfig
from fedpub.data.base import Splits
from fedpub.data.stackoverflow import (
    TAG_COUNT_FILE,
    WORD_COUNT_FILE,
    StackOverflowReader,
    load_word_counts,
    open_stackoverflow,
)
from fedpub.data.stackoverflow_tasks import WORD_VOCAB_SIZE, NextWordPrediction, TagPrediction, load_vocabularies
from fedpub.data.stackoverflow_writers import SyntheticStackOverflowSpec, ensure_synthetic_stackoverflow


def generate_synthetic(config: ExperimentConfig) -> None:
    """Write the look-alike train, test and held-out files of ``data.synthetic_stackoverflow`` into ``data.path``
    unless they are there."""
    synthetic = config.data.synthetic_stackoverflow
    shared = synthetic.model_dump(exclude={"num_clients", "test_clients", "seed"})
    ensure_synthetic_stackoverflow(
        config.data.path,
        SyntheticStackOverflowSpec(num_clients=synthetic.num_clients, seed=synthetic.seed, **shared),
        SyntheticStackOverflowSpec(num_clients=synthetic.test_clients, seed=synthetic.seed + 1, **shared),
        SyntheticStackOverflowSpec(num_clients=synthetic.test_clients, seed=synthetic.seed + 2, **shared),
    )


def open_splits(config: ExperimentConfig) -> Splits:
    """The task's views over the train, test (or held-out) and, for a held-out public pool, held-out splits."""
    data, so = config.data, config.data.stackoverflow
    root = Path(data.path)
    names = ["train", so.test_split] + (["heldout"] if data.public.pool == "heldout" else [])
    vocabularies = load_vocabularies(
        root / WORD_COUNT_FILE, root / TAG_COUNT_FILE, tag_vocab_size=so.tag_vocab_size
    )
    return Splits(*(stackoverflow_view(config, open_stackoverflow(root, split), vocabularies) for split in names))


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


def token_frequencies(config: ExperimentConfig) -> list[float]:
    """The counts of the task's word vocabulary, in its order (the first words of ``stackoverflow.word_count``)."""
    return [float(c) for c in load_word_counts(Path(config.data.path) / WORD_COUNT_FILE, WORD_VOCAB_SIZE).values()]
