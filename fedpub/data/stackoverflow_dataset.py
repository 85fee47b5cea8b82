"""Federated StackOverflow's declaration (TFF ``simulation/datasets/stackoverflow.py`` and its baseline tasks;
``shared/reference/datasets.md`` §2): the HDF5 and SQLite layouts with the two vocabulary files, the look-alike
files, tag prediction (multi-label, and AdaDPS's single-label variant) and next-word prediction, their models, the
held-out split (the users with ``user_id % 10 == 0``, datasets.md §2) as public users, and TFF's files. Light: names
only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedpub.config_section import Section
from fedpub.data.remote_files import tff_file
from fedpub.data.spec import Dataset, ModelDeclaration, Source, TaskDeclaration


class SyntheticStackOverflowConfig(Section):
    """Offline look-alike StackOverflow files (TFF's HDF5 layout and count files)."""

    num_clients: int = Field(400, ge=2)
    test_clients: int = Field(100, ge=1)
    min_examples: int = Field(5, ge=1)
    max_examples: int = Field(30, ge=1)
    topic_rank_offset: int = Field(
        0, ge=0, description="anti_aligned: frequency rank of the first tag's topic words (large: rarer words)"
    )
    seed: int = 0
    num_words: int = Field(
        12_000, ge=10_000, description="words drawn (background and topic words); at least the tasks' 10,000"
    )
    num_tags: int = Field(600, ge=1, description="tags drawn (more than stackoverflow.tag_vocab_size: some OOV)")
    topic_words: int = Field(7, ge=1, description="topic words of each tag")
    topic_share: float = Field(0.3, ge=0.0, le=1.0, description="share of a post's words drawn from its topic words")
    side_information: Literal["anti_aligned", "aligned"] = Field(
        "anti_aligned", description="aligned: the topic words are rare words of their own (AdaDPS's assumption); "
        "anti_aligned: they are background words, the popular tags' frequent ones"
    )
    background_size: int = Field(
        0, ge=0, description="aligned: the background draws from this many most frequent words (0: every word the "
        "topic words leave); the words between are never drawn"
    )
    favourite_share: float = Field(
        0.7, ge=0.0, le=1.0, description="chance that each of a post's two tag draws is its user's favourite tag"
    )
    background: Literal["zipf", "wordfreq"] = Field(
        "zipf", description="the background words' frequencies: a Zipf law, or English's (the wordfreq package)"
    )


class StackOverflowConfig(Section):
    """TFF's StackOverflow tasks: vocabularies from the count files, features as TFF builds them."""

    tag_vocab_size: int = Field(500, ge=1)
    normalization: Literal["in_vocab", "all_tokens"] = Field(
        "in_vocab", description="bag of words ÷ in-vocabulary tokens (TFF now) or ÷ all tokens (older TFF, AdaDPS)"
    )
    max_elements: int | None = Field(1000, ge=1, description="cap on a user's examples (TFF: 1,000)")
    test_split: Literal["test", "heldout"] = "test"


_SOURCES = "fedpub.data.stackoverflow_sources"
_TASKS = "fedpub.tasks.stackoverflow"

STACKOVERFLOW = Dataset(
    name="stackoverflow",
    title="federated StackOverflow (TFF): posts grouped by user, with word and tag counts",
    reference="tensorflow_federated/python/simulation/datasets/stackoverflow.py and baselines/stackoverflow/",
    sources=(
        Source(
            "stackoverflow",
            "a directory with stackoverflow_{train,held_out,test}.h5 or stackoverflow.sqlite[.lzma], and "
            "stackoverflow.word_count and stackoverflow.tag_count",
            f"{_SOURCES}:open_splits",
        ),
        Source(
            "synthetic_stackoverflow",
            "look-alike files written there in TFF's HDF5 layout, with the two count files, from "
            "data.synthetic_stackoverflow",
            f"{_SOURCES}:open_splits",
            generate=f"{_SOURCES}:generate_synthetic",
        ),
    ),
    tasks=(
        TaskDeclaration(
            "so_tag", "multi-label tags: sigmoid cross-entropy, recall@5, precision", f"{_TASKS}:TAG_PREDICTION"
        ),
        TaskDeclaration(
            "so_tag_single", "AdaDPS's single-label tags: softmax cross-entropy", "fedpub.tasks:CLASSIFICATION"
        ),
        TaskDeclaration(
            "so_nwp", "next word: token cross-entropy, accuracy without pad/OOV/BOS/EOS",
            f"{_TASKS}:NEXT_WORD_PREDICTION",
        ),
    ),
    models=(
        ModelDeclaration(
            "so_tag_logreg", "logistic regression, 10,000 words -> 500 tags",
            "fedpub.models.stackoverflow:TagLogisticRegression", bag_of_words_weight="0.weight",
        ),
        ModelDeclaration("so_nwp_lstm", "Embedding 96, LSTM 670 (TFF)", "fedpub.models.stackoverflow:NextWordLstm"),
    ),
    files=(
        tff_file(
            "stackoverflow.tar.bz2",
            "99eca2f8b8327a09e5fc123979df2d237acbc5e52322f6d86bf523ee47b961a2",
            mirror=True,
            members=("stackoverflow_train.h5", "stackoverflow_held_out.h5", "stackoverflow_test.h5"),
        ),
        tff_file(
            "stackoverflow.word_count.tar.bz2",
            "1dc00256d6e527c54b9756d968118378ae14e6692c0b3b6cad470cdd3f0c519c",
            mirror=True,
            members=("stackoverflow.word_count",),
        ),
        tff_file(
            "stackoverflow.tag_count.tar.bz2",
            "6fe281cec490d9384a290d560072438e7e2b377bbb823876ce7bd6f82696772d",
            mirror=True,
            members=("stackoverflow.tag_count",),
        ),
        tff_file("stackoverflow.sqlite.lzma", None, mirror=False),
    ),
    client_fields=frozenset({"creation_date", "score", "tags", "title", "tokens", "type"}),
    describers="fedpub.data.stackoverflow_files:DESCRIBERS",
    config_fields={
        "synthetic_stackoverflow": (SyntheticStackOverflowConfig, SyntheticStackOverflowConfig()),
        "stackoverflow": (StackOverflowConfig, StackOverflowConfig()),
    },
    public_pools=("train_fraction", "heldout"),
    sqlite_splits=("train", "heldout", "test"),
    device="fedpub.data.stackoverflow_device:DEVICE",
    token_frequencies=f"{_SOURCES}:token_frequencies",
)
