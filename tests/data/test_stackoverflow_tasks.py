"""StackOverflow task views: tag-prediction features (both normalisations), targets, the AdaDPS single-label
variant, next-word ids, max_elements, and the metric helpers, on hand-computed examples and every edge case."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpub.data.base import ClientData, FederatedDataset
from fedpub.data.stackoverflow import StackOverflowH5, StackOverflowSqlite
from fedpub.data.stackoverflow_tasks import (
    NextWordPrediction,
    TagPrediction,
    adadps_tag_prediction,
    load_vocabularies,
    masked_accuracy,
    next_word_ids,
    next_word_metrics,
    precision_at_threshold,
    recall_at_k,
    special_tokens,
    tag_features,
    tag_targets,
    vocab_index,
)
from fedpub.data.stackoverflow_writers import (
    SyntheticStackOverflowSpec,
    edge_case_dataset,
    write_stackoverflow_h5,
    write_stackoverflow_sqlite,
    write_tag_count,
    write_synthetic_stackoverflow,
    write_word_count,
)

EDGE = edge_case_dataset()
ABC = vocab_index(["a", "b", "c"])


@pytest.fixture(scope="module")
def edge_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("so_edge")
    return {
        "h5": write_stackoverflow_h5(root / "stackoverflow_train.h5", EDGE.clients),
        "sqlite": write_stackoverflow_sqlite(root / "stackoverflow.sqlite", {"train": EDGE.clients}),
        "word_count": write_word_count(root / "stackoverflow.word_count", EDGE.word_counts),
        "tag_count": write_tag_count(root / "stackoverflow.tag_count", EDGE.tag_counts),
    }


@pytest.fixture(scope="module")
def vocabs(edge_files: dict[str, Path]) -> tuple[list[str], list[str]]:
    words, tags = load_vocabularies(edge_files["word_count"], edge_files["tag_count"], tag_vocab_size=4)
    assert len(words) == 19  # the file is shorter than the default 10,000 words: all of it
    assert tags == ["python", "vb . net", "c#", "java"]  # sorted by count, the 7-7 tie in file order
    return words, tags


@pytest.fixture(scope="module")
def reader(edge_files: dict[str, Path]) -> StackOverflowH5:
    return StackOverflowH5(edge_files["h5"])


def _reference_features(tokens: str, title: str, words: list[str], normalization: str) -> np.ndarray:
    """A plain re-statement of TFF's definition, one example at a time: the bytes split on ASCII whitespace."""
    pieces = f"{tokens} {title}".encode("utf-8", "surrogateescape").split()
    keys = [w.encode() for w in words]
    counts = Counter(p for p in pieces if p in keys)
    x = np.zeros(len(words), dtype=np.float64)
    for word, count in counts.items():
        x[keys.index(word)] = count
    total = sum(counts.values()) if normalization == "in_vocab" else len(pieces)
    return (x / total if total else x).astype(np.float32)


# --- hand examples --------------------------------------------------------------------------------------------


def test_both_normalisations_on_a_hand_example() -> None:
    tokens, titles = ["a b a zzz", "", "zzz yyy", "c"], ["c", "", "", "  c\tb "]
    in_vocab = tag_features(tokens, titles, ABC)
    all_tokens = tag_features(tokens, titles, ABC, normalization="all_tokens")
    assert in_vocab.dtype == np.float32 and in_vocab.shape == (4, 3)
    # "a b a zzz c": a=2, b=1, c=1 in the vocabulary, 5 tokens in all.
    np.testing.assert_array_equal(in_vocab[0], np.float32([2 / 4, 1 / 4, 1 / 4]))
    np.testing.assert_array_equal(all_tokens[0], np.float32([2 / 5, 1 / 5, 1 / 5]))
    np.testing.assert_array_equal(in_vocab[1], [0, 0, 0])  # empty sentence: zeros, not NaN
    np.testing.assert_array_equal(all_tokens[1], [0, 0, 0])
    np.testing.assert_array_equal(in_vocab[2], [0, 0, 0])  # only OOV words
    np.testing.assert_array_equal(all_tokens[2], [0, 0, 0])
    np.testing.assert_array_equal(in_vocab[3], np.float32([0, 1 / 3, 2 / 3]))  # ASCII whitespace splits
    assert in_vocab[0].sum() == pytest.approx(1.0) and all_tokens[0].sum() < 1.0
    with pytest.raises(ValueError, match="normalization"):
        tag_features(tokens, titles, ABC, normalization="mean")  # type: ignore[arg-type]


def test_tag_targets_on_a_hand_example() -> None:
    tags = vocab_index(["python", "vb . net", "c#"])
    y = tag_targets(["vb . net|c#", "html", "", "python|html|python"], tags)
    np.testing.assert_array_equal(y, np.float32([[0, 1, 1], [0, 0, 0], [0, 0, 0], [2, 0, 0]]))  # TFF sums one-hots


def test_next_word_ids_on_a_hand_example() -> None:
    # V = 3: pad 0, a 1, b 2, c 3, OOV 4, BOS 5, EOS 6; sequence length 4.
    assert special_tokens(3) == (0, 4, 5, 6)
    assert special_tokens() == (0, 10_001, 10_002, 10_003)
    seq = next_word_ids(["a zzz c", "a b c a b", "", "a  b", "a b c a"], ABC, sequence_length=4)
    expected = [
        [5, 1, 4, 3, 6],  # OOV in the middle, EOS because 3 < 4
        [5, 1, 2, 3, 1],  # truncated to 4 words: no EOS
        [5, 4, 6, 0, 0],  # '' splits to one empty (OOV) word
        [5, 1, 4, 2, 6],  # a doubled space keeps an empty word
        [5, 1, 2, 3, 1],  # exactly 4 words: no EOS
    ]
    np.testing.assert_array_equal(seq, expected)
    assert seq.dtype == np.int64


def test_recall_at_k_on_a_hand_example() -> None:
    logits = torch.tensor([[5.0, 4.0, 3.0, 2.0], [0.0, 1.0, 2.0, 3.0], [1.0, 0.0, 0.0, 0.0]])
    targets = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    hits, total = recall_at_k(logits, targets, k=2)
    # row 0: top-2 {0, 1} holds 1 of 2 true tags; row 1: top-2 {3, 2} holds 1 of 3; row 2 has none.
    assert (hits.item(), total.item()) == (2, 5)
    hits, total = recall_at_k(logits, targets, k=4)
    assert (hits.item(), total.item()) == (5, 5)
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k(logits, targets, k=5)


def test_precision_at_threshold_on_a_hand_example() -> None:
    logits = torch.tensor([[1.0, -1.0, 2.0], [-2.0, 3.0, 0.0]])  # sigmoid(0) = 0.5 is not > 0.5
    targets = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    hits, predicted = precision_at_threshold(logits, targets)
    assert (hits.item(), predicted.item()) == (2, 3)  # predicted: (0,0), (0,2), (1,1); right: (0,0), (1,1)
    hits, predicted = precision_at_threshold(logits, targets, threshold=0.1)
    assert (hits.item(), predicted.item()) == (4, 6)  # sigmoid(-2) = 0.12: every tag predicted


def test_next_word_accuracies_on_a_hand_example() -> None:
    # V = 3: pad 0, OOV 4, BOS 5, EOS 6. Predictions are the argmax of one-hot logits.
    targets = torch.tensor([[1, 4, 3, 6, 0], [2, 6, 0, 0, 0]])
    predicted = torch.tensor([[1, 4, 2, 6, 0], [2, 1, 0, 3, 3]])
    logits = torch.nn.functional.one_hot(predicted, 7).float()
    metrics = next_word_metrics(logits, targets, vocab_size=3)
    # Non-pad targets: 1 4 3 6 | 2 6 (6 tokens); right: 1, 4, 6, 2 (4).
    assert [v.item() for v in metrics["accuracy"]] == [4, 6]
    assert [v.item() for v in metrics["accuracy_without_out_of_vocab"]] == [3, 5]
    assert [v.item() for v in metrics["accuracy_without_out_of_vocab_or_end_of_sentence"]] == [2, 3]
    assert [v.item() for v in masked_accuracy(logits, targets, [])] == [6, 10]  # pads predicted as pad count


# --- the edge cases through the task views --------------------------------------------------------------------


@pytest.mark.parametrize("normalization", ["in_vocab", "all_tokens"])
def test_tag_prediction_edge_cases(reader: StackOverflowH5, vocabs: tuple, normalization: str) -> None:
    words, tags = vocabs
    task = TagPrediction(reader, words, tags, normalization=normalization)  # type: ignore[arg-type]
    assert isinstance(task, FederatedDataset)
    assert task.num_classes == 4 and task.num_features == 19 and task.client_ids == reader.client_ids
    for cid, examples in EDGE.clients.items():
        data = task.client_data(cid)
        assert isinstance(data, ClientData) and len(data) == len(examples) == task.num_examples(cid)
        assert data.x.dtype == torch.float32 and data.x.shape == (len(examples), 19)
        assert data.y.dtype == torch.float32 and data.y.shape == (len(examples), 4)
        for i, example in enumerate(examples):
            expected = _reference_features(example["tokens"], example["title"], words, normalization)
            np.testing.assert_allclose(data.x[i].numpy(), expected, rtol=1e-6, atol=0)
    question, answer = task.client_data("00000007").x
    assert question[words.index("<URL>")] > 0  # '<URL>' is a word like any other
    assert answer[words.index("vb")] > 0 and answer[words.index("how")] > 0  # the answer's title is used
    np.testing.assert_array_equal(task.client_data("00000007").y, [[0, 1, 1, 0], [0, 1, 1, 0]])  # 'vb . net', 'c#'
    empty, all_oov, long, _ = task.client_data("00000003").x
    assert not empty.any() and not all_oov.any() and not torch.isnan(empty).any()
    assert long.sum().item() == pytest.approx(1.0)  # 25 + 2 tokens, all in the vocabulary
    np.testing.assert_array_equal(task.client_data("00000003").y[:3], [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 1]])


def test_negative_score_and_dates_do_not_matter(reader: StackOverflowH5, vocabs: tuple) -> None:
    assert reader.examples("00000007")[0]["score"] == -3
    assert reader.examples("00000007")[0]["creation_date"] == "2008-08-10 08:28:52.1 UTC"


def test_hdf5_and_sqlite_give_identical_task_tensors(edge_files: dict[str, Path], vocabs: tuple) -> None:
    words, tags = vocabs
    with StackOverflowSqlite(edge_files["sqlite"], "train") as sql:
        pairs = [
            (TagPrediction(r, words, tags), NextWordPrediction(r, words))
            for r in (StackOverflowH5(edge_files["h5"]), sql)
        ]
        for cid in EDGE.clients:
            for a, b in zip(*pairs):
                da, db = a.client_data(cid), b.client_data(cid)
                assert torch.equal(da.x, db.x) and torch.equal(da.y, db.y)


def test_max_elements_first_or_seeded_subset(reader: StackOverflowH5, vocabs: tuple) -> None:
    words, tags = vocabs
    cap = EDGE.max_elements
    full = TagPrediction(reader, words, tags).client_data("00000042")
    task = TagPrediction(reader, words, tags, max_elements=cap)
    assert task.num_examples("00000042") == cap and task.num_examples("00000003") == 4
    first = task.client_data("00000042")
    assert torch.equal(first.x, full.x[:cap]) and torch.equal(first.y, full.y[:cap])
    assert len(task.client_data("00000003")) == 4
    draws = [task.client_data("00000042", generator=np.random.default_rng(seed)) for seed in (1, 1, 2, 3, 4)]
    assert torch.equal(draws[0].x, draws[1].x)
    rows = [[int(torch.nonzero((full.x == row).all(1))[0]) for row in d.x] for d in draws]
    assert all(len(set(r)) == cap and r == sorted(r) for r in rows)  # distinct rows, kept in stored order
    assert any(r != list(range(cap)) for r in rows)  # not always the first ones
    nwp = NextWordPrediction(reader, words, max_elements=cap)
    assert nwp.num_examples("00000042") == cap and len(nwp.client_data("00000042")) == cap
    with pytest.raises(ValueError, match="max_elements"):
        TagPrediction(reader, words, tags, max_elements=0)


def test_next_word_prediction_edge_cases(reader: StackOverflowH5, vocabs: tuple) -> None:
    words, _ = vocabs
    task = NextWordPrediction(reader, words)
    pad, oov, bos, eos = special_tokens(19)
    assert task.num_classes == 23 and (oov, bos, eos) == (20, 21, 22)
    data = task.client_data("00000003")
    assert data.x.shape == data.y.shape == (4, 20) and data.x.dtype == torch.int64
    seq = torch.cat([data.x[:, :1], data.y], dim=1)
    assert torch.equal(data.x[:, 1:], data.y[:, :-1])
    assert seq[0].tolist() == [bos, oov, eos] + [pad] * 18  # empty sentence
    assert seq[1, :4].tolist() == [bos, oov, oov, eos]  # all OOV
    ids = [words.index(w) + 1 for w in EDGE.clients["00000003"][2]["tokens"].split(" ")[:20]]
    assert seq[2].tolist() == [bos] + ids  # 25 words: truncated to 20, no EOS, no pad
    assert seq[3, :5].tolist() == [bos, words.index("a") + 1, oov, words.index("list") + 1, eos]
    question = torch.cat([task.client_data("00000007").x[0, :1], task.client_data("00000007").y[0]])
    assert question[2].item() == words.index("<URL>") + 1  # "see <URL> for the list ."; title unused
    assert (question[1:7] != oov).all() and question[7].item() == eos


def test_single_label_and_adadps_split(reader: StackOverflowH5, vocabs: tuple) -> None:
    words, tags = vocabs
    single = TagPrediction(reader, words, tags, normalization="all_tokens", single_label=True)
    multi = TagPrediction(reader, words, tags, normalization="all_tokens")
    for cid in EDGE.clients:
        s, m = single.client_data(cid), multi.client_data(cid)
        assert s.y.dtype == torch.int64 and torch.equal(s.y, m.y.argmax(1)) and torch.equal(s.x, m.x)
    assert single.client_data("00000003").y.tolist() == [0, 0, 0, 0]  # no top tag -> 0; python is 0 anyway
    assert single.client_data("00000007").y.tolist() == [1, 1]  # 'vb . net' outranks 'c#'

    train, test = adadps_tag_prediction(reader, words, tags, num_clients=2, seed=5)
    assert train.client_ids == test.client_ids == ["00000003", "00000007"] and train.num_classes == 4
    for cid in train.client_ids:
        n = reader.num_examples(cid)
        a, b = train.client_data(cid), test.client_data(cid)
        assert len(a) == train.num_examples(cid) == int(0.8 * n) and len(b) == test.num_examples(cid) == n - len(a)
        pooled = torch.cat([a.x, b.x])
        full = single.client_data(cid).x
        assert sorted(map(tuple, pooled.tolist())) == sorted(map(tuple, full.tolist()))  # a partition
        again = adadps_tag_prediction(reader, words, tags, num_clients=2, seed=5)[0].client_data(cid)
        assert torch.equal(again.x, a.x)


def test_vocab_must_be_unique() -> None:
    with pytest.raises(ValueError, match="twice"):
        vocab_index(["a", "b", "a"])


def test_a_thousand_client_cohort_is_fast(tmp_path: Path) -> None:
    """Feature building stays vectorised: 1,000 small clients in well under a few seconds (about 0.5 s here)."""
    files = write_synthetic_stackoverflow(tmp_path, SyntheticStackOverflowSpec(num_clients=1_000, seed=1))
    words, tags = load_vocabularies(files.word_count, files.tag_count)
    assert (len(words), len(tags)) == (10_000, 500)
    with StackOverflowH5(files.data) as so:
        task = TagPrediction(so, words, tags)
        start = time.perf_counter()
        sizes = [len(task.client_data(cid)) for cid in so.client_ids]
        elapsed = time.perf_counter() - start
    assert sum(sizes) >= 1_000 and elapsed < 10.0
