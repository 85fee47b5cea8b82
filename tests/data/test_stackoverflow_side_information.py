"""The StackOverflow look-alike's side information (fedpub issue 36): aligned data whose label-carrying topic words
are rare words of their own over a real English frequency profile (wordfreq), anti-aligned data as before (the
default, unchanged), the Spearman correlation that tells them apart, and the refusals."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from scipy.stats import spearmanr

import fedpub
from fedpub.config import parse_config
from fedpub.data.base import DatasetError
from fedpub.data.stackoverflow_writers import (
    SyntheticStackOverflowSpec,
    count_share_spearman,
    ensure_synthetic_stackoverflow,
    synthetic_columns,
    synthetic_counts,
)

SIZES = {"num_clients": 60, "min_examples": 5, "max_examples": 15, "num_words": 600, "num_tags": 10,
         "topic_words": 40, "topic_share": 0.3, "background": "wordfreq", "seed": 1}
"""200 background words and 10 tags of 40 topic words: small enough that every background word is drawn often."""
ALIGNED = SyntheticStackOverflowSpec(**SIZES, side_information="aligned")
ANTI = SyntheticStackOverflowSpec(**SIZES, side_information="anti_aligned")


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


def test_the_default_construction_is_bit_identical_to_the_one_before_the_side_information_knob() -> None:
    """Digests of a small default spec's clients and count files, recorded before the knob was added."""
    spec = SyntheticStackOverflowSpec(num_clients=30, min_examples=0, max_examples=5, seed=3)
    assert spec.side_information == "anti_aligned" and spec.background == "zipf"
    assert _digest(list(synthetic_columns(spec))) == "f146367a9b3f9341e88374cc62e211fdd5f0030fa732b190228f0c6197ac52f1"
    assert _digest(synthetic_counts(spec)) == "26d316cde96716d57ac341cbdac2820b6d97b07018c27a9dd0853348d12429d8"


def test_a_folder_generated_before_the_side_information_knob_is_reused_and_an_aligned_spec_is_refused_there(
    tmp_path: Path,
) -> None:
    """The marker as fedpub wrote it before issue 36 (the spec's nine fields then): the same default spec's data
    is that data still, so the folder is reused untouched; a spec with the new fields set is another spec."""
    train = SyntheticStackOverflowSpec(num_clients=6, min_examples=0, max_examples=3, seed=3)
    test = SyntheticStackOverflowSpec(num_clients=3, max_examples=4, seed=4)
    root = ensure_synthetic_stackoverflow(tmp_path / "so", train, test, test)
    before = {name: {"num_clients": spec.num_clients, "min_examples": spec.min_examples,
                     "max_examples": spec.max_examples, "num_words": 12_000, "num_tags": 600, "max_tokens": 30,
                     "max_title_words": 8, "topic_rank_offset": 0, "seed": spec.seed}
              for name, spec in (("train", train), ("test", test), ("heldout", test))}
    marker = root / "fedpub_synthetic_stackoverflow.json"
    marker.write_text(json.dumps({**before, "word_count": "counted in the generated training tokens",
                                  "tag_count": "counted in the generated training tags"}, sort_keys=True))
    stamps = {path.name: path.stat().st_mtime_ns for path in root.iterdir()}
    assert ensure_synthetic_stackoverflow(root, train, test, test) == root
    assert {path.name: path.stat().st_mtime_ns for path in root.iterdir()} == stamps
    aligned = SyntheticStackOverflowSpec(num_clients=6, min_examples=0, max_examples=3, seed=3,
                                         side_information="aligned", topic_words=5)
    with pytest.raises(DatasetError, match="another spec .*side_information"):
        ensure_synthetic_stackoverflow(root, aligned, test, test)


def test_aligned_topic_words_are_rare_and_the_frequent_words_label_free_anti_aligned_the_opposite() -> None:
    background = ALIGNED.background_words
    assert background == 600 - 10 * 40
    aligned, _ = synthetic_counts(ALIGNED)
    frequent = [int(word[1:]) for word in list(aligned)[:30]]
    assert all(rank < background for rank in frequent)  # the 30 most frequent words: background (stop-word-like)
    assert list(aligned)[:3] == ["w0", "w1", "w2"]  # "the", "to", "and": English's profile
    topic = [aligned[f"w{r}"] for r in range(background, 600)]
    assert max(topic) < aligned["w20"]  # every topic word rarer than the 21st background word
    anti, _ = synthetic_counts(ANTI)
    assert any(int(word[1:]) < 40 for word in list(anti)[:5])  # tag 0's topic words are ranks 0-39: frequent
    assert count_share_spearman(ALIGNED) < -0.3 and count_share_spearman(ANTI) > 0.3


def test_a_small_aligned_background_draws_only_its_most_frequent_words_and_the_topic_words() -> None:
    """background_size: the background draws from English's 50 most frequent words; the ranks between them and
    the topic words are never drawn (count 0), so the drawn words are stop-words and rare topic words."""
    spec = SyntheticStackOverflowSpec(**SIZES, side_information="aligned", background_size=50)
    counts, _ = synthetic_counts(spec)
    drawn = {int(word[1:]) for word, count in counts.items() if count}
    assert drawn <= set(range(50)) | set(range(200, 600)) and len(drawn & set(range(50))) == 50
    assert count_share_spearman(spec) < -0.3


def test_count_share_spearman_matches_a_recount_from_the_word_count_file() -> None:
    """In aligned data only the topic draw gives a topic word, so a word's label-carrying share is 1 for the topic
    words and 0 for the background: Spearman recomputed from the counts alone must agree."""
    counts, _ = synthetic_counts(ALIGNED)
    drawn = {w: c for w, c in counts.items() if c}
    shares = [float(int(w[1:]) >= ALIGNED.background_words) for w in drawn]
    expected = spearmanr(list(drawn.values()), shares).statistic
    assert count_share_spearman(ALIGNED) == pytest.approx(expected)


def test_side_information_data_is_deterministic_and_seeded() -> None:
    assert list(synthetic_columns(ALIGNED)) == list(synthetic_columns(ALIGNED))
    other = SyntheticStackOverflowSpec(**{**SIZES, "seed": 2}, side_information="aligned")
    assert list(synthetic_columns(ALIGNED)) != list(synthetic_columns(other))
    assert list(synthetic_columns(ALIGNED)) != list(synthetic_columns(ANTI))


def test_favourite_share_sets_how_often_a_post_carries_its_user_s_favourite_tag() -> None:
    """At 1 every post of a user carries one tag (the favourite); lower, a user's posts mix more tags. The default
    (0.7) is the construction before the knob: the digests above, and the marker leaves it out."""
    def tags_a_user(share: float) -> float:
        spec = SyntheticStackOverflowSpec(**SIZES, side_information="aligned", favourite_share=share)
        users = [set("|".join(columns["tags"]).split("|")) for _, columns in synthetic_columns(spec)]
        return sum(map(len, users)) / len(users)
    assert tags_a_user(1.0) == 1.0
    assert tags_a_user(0.7) < tags_a_user(0.3)
    assert "favourite_share" not in ALIGNED.identity()
    assert SyntheticStackOverflowSpec(favourite_share=0.3).identity()["favourite_share"] == 0.3


def test_the_wordfreq_background_is_refused_without_wordfreq_naming_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "wordfreq", None)  # import wordfreq now raises ImportError
    with pytest.raises(ValueError, match=r"wordfreq package: pip install 'fedpub\[reproductions\]'"):
        SyntheticStackOverflowSpec(background="wordfreq")
    SyntheticStackOverflowSpec(side_information="aligned", num_tags=20, topic_words=100)  # zipf needs nothing


@pytest.mark.parametrize(("changes", "message"), [
    ({"side_information": "sideways"}, "side_information must be one of anti_aligned, aligned"),
    ({"background": "english"}, "background must be one of zipf, wordfreq"),
    ({"topic_share": 1.5}, r"topic_share must be in \[0, 1\]"),
    ({"topic_words": 0}, "topic_words must be >= 1"),
    ({"favourite_share": -0.1}, r"favourite_share must be in \[0, 1\]"),
    ({"side_information": "aligned", "topic_rank_offset": 5}, "leave it 0"),
    ({"side_information": "aligned", "num_tags": 600, "topic_words": 20}, "raise num_words"),
    ({"side_information": "aligned", "num_tags": 20, "topic_words": 100, "background_size": 10_001},
     r"background_size must be in \[0, 10000\]"),
    ({"background_size": 100}, "anti_aligned draws from every word: leave it 0"),
])
def test_the_spec_refuses_what_it_cannot_generate(changes, message) -> None:
    with pytest.raises(ValueError, match=message):
        SyntheticStackOverflowSpec(**changes)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("side_information", "sideways", r"side_information.*'anti_aligned' or 'aligned'"),
    ("background", "english", r"background.*'zipf' or 'wordfreq'"),
    ("num_words", 5_000, r"num_words.*greater than or equal to 10000"),
    ("topic_share", -0.1, r"topic_share.*greater than or equal to 0"),
    ("favourite_share", 1.5, r"favourite_share.*less than or equal to 1"),
])
def test_the_config_names_the_field_and_the_allowed_values(field, value, message) -> None:
    raw = {"task": "so_tag_single", "model": {"name": "so_tag_logreg"},
           "data": {"source": "synthetic_stackoverflow", "synthetic_stackoverflow": {field: value}}}
    with pytest.raises(fedpub.ConfigError, match=message):
        parse_config(raw, "test")
