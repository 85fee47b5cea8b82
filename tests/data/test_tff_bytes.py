"""TFF's StackOverflow preprocessing on byte strings, through real files written in TFF's layouts (issue 20, item 2).

TFF never decodes the text: ``parse_example`` and h5py give ``tf.string`` bytes; tag prediction splits
``tokens + b' ' + title`` with ``tf.strings.split`` (runs of ASCII whitespace: space, \\t, \\n, \\v, \\f, \\r) and
the tags with ``sep='|'``; next-word prediction splits ``tokens`` with ``sep=' '``; both look the pieces up in a
table keyed by the vocabulary's UTF-8 bytes; the tag target is ``reduce_sum(one_hot(...))``
(``tensorflow_federated/python/simulation/baselines/stackoverflow/{tag,word}_prediction_preprocessing.py``). The
expected values below are worked out by hand from those definitions, not computed by fedpub.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpub.data.base import DatasetError
from fedpub.data.stackoverflow import (
    StackOverflowExample,
    decode_text,
    encode_text,
    load_tag_counts,
    open_stackoverflow,
)
from fedpub.data.stackoverflow_tasks import (
    NextWordPrediction,
    TagPrediction,
    load_vocabularies,
    recall_at_k,
    vocab_index,
)
from fedpub.data.stackoverflow_writers import (
    write_stackoverflow_h5,
    write_stackoverflow_sqlite,
    write_tag_count,
    write_word_count,
)
from fedpub.simulations.tools.data_inspect import inspect_path

WORDS = {"python": 9, "list": 8, "how": 7, "to": 6, "café": 5, "x": 4}  # ids 0..5 (next-word ids 1..6)
TAGS = {"python": 5, "java": 4, "c#": 3}
pytestmark = pytest.mark.filterwarnings("ignore:.*no index on client_id:UserWarning")  # TFF's layout has none


def _post(tokens: bytes, title: bytes, tags: bytes) -> StackOverflowExample:
    return StackOverflowExample(
        creation_date="2010-01-08 09:34:05 UTC",
        score=1,
        tags=decode_text(tags),
        title=decode_text(title),
        tokens=decode_text(tokens),
        type="question",
    )


POSTS = [
    # 0: a non-breaking space (UTF-8 c2 a0) in the title joins its words; a tag listed twice sums to 2.
    _post(b"how to", "python\u00a0list".encode(), b"python|python"),
    # 1: \x1c-\x1f are not ASCII whitespace (Python's str.split() splits on them; tf.strings.split does not).
    _post(b"x", b"python\x1clist\x1dhow\x1eto\x1fx", b"java|python"),
    # 2: U+0085 (NEL, UTF-8 c2 85) joins too; a valid UTF-8 word (caf\xc3\xa9) matches its vocabulary entry.
    _post("list café".encode(), "python\u0085list".encode(), b"python"),
    # 3: every ASCII whitespace byte splits; a tag listed twice outweighs a more frequent tag in the argmax.
    _post(b"how\tto\nlist", "x\x0bpython\x0ccafé\r".encode(), b"c#|java|c#"),
    # 4: not valid UTF-8 in the body, title and tags: read as bytes, the invalid words out of vocabulary.
    _post(b"caf\xe9 list", b"\xff\xfe python", b"python|j\xe4va"),
    # 5: lone bytes \xa0 and \x85 (latin-1 spaces, invalid UTF-8) split nothing; no tag.
    _post(b"to\xa0x to", b"python\x85list", b""),
]
X_IN_VOCAB = [  # columns python, list, how, to, café, x
    [0, 0, 1 / 2, 1 / 2, 0, 0],  # how to | python\xa0list (OOV)
    [0, 0, 0, 0, 0, 1],  # x | one OOV word
    [0, 1 / 2, 0, 0, 1 / 2, 0],  # list café | python\x85list (OOV)
    [1 / 6] * 6,  # how to list x python café
    [1 / 2, 1 / 2, 0, 0, 0, 0],  # caf\xe9 (OOV) list \xff\xfe (OOV) python
    [0, 0, 0, 1, 0, 0],  # to\xa0x (OOV) to | python\x85list (OOV)
]
X_ALL_TOKENS = [  # the same counts divided by all tokens, OOV included (older TFF, AdaDPS)
    [0, 0, 1 / 3, 1 / 3, 0, 0],
    [0, 0, 0, 0, 0, 1 / 2],
    [0, 1 / 3, 0, 0, 1 / 3, 0],
    [1 / 6] * 6,
    [1 / 4, 1 / 4, 0, 0, 0, 0],
    [0, 0, 0, 1 / 3, 0, 0],
]
Y = [[2, 0, 0], [1, 1, 0], [1, 0, 0], [0, 1, 2], [1, 0, 0], [0, 0, 0]]  # python, java, c#
# next-word ids for V = 6: pad 0, words 1..6, OOV 7, BOS 8, EOS 9; sequence length 4; split on b' ' only.
NEXT_WORD = [
    [8, 3, 4, 9, 0],  # how to
    [8, 6, 9, 0, 0],  # x
    [8, 2, 5, 9, 0],  # list café
    [8, 7, 9, 0, 0],  # how\tto\nlist: one word
    [8, 7, 2, 9, 0],  # caf\xe9 list
    [8, 7, 4, 9, 0],  # to\xa0x to
]


@pytest.fixture(scope="module", params=["h5", "sqlite", "sqlite.lzma"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The posts as one client of the train split (and of the test split a run also reads), in one of TFF's
    layouts, with the two count files."""
    root = tmp_path_factory.mktemp(request.param.replace(".", "_"))
    clients = {"00000001": POSTS}
    if request.param == "h5":
        write_stackoverflow_h5(root / "stackoverflow_train.h5", clients)
    else:
        write_stackoverflow_sqlite(root / f"stackoverflow.{request.param}", {"train": clients, "test": clients},
                                   index=False)
    write_word_count(root / "stackoverflow.word_count", WORDS)
    write_tag_count(root / "stackoverflow.tag_count", TAGS)
    return root


@pytest.fixture(scope="module")
def vocabularies(folder: Path) -> tuple[list[str], list[str]]:
    return load_vocabularies(folder / "stackoverflow.word_count", folder / "stackoverflow.tag_count")


def test_the_stored_bytes_are_read_back_exactly(folder: Path) -> None:
    with open_stackoverflow(folder, "train") as reader:
        columns = reader.columns("00000001", ("tokens", "title", "tags"))
    assert encode_text(columns["title"][0]) == b"python\xc2\xa0list"  # UTF-8 stays UTF-8
    assert [encode_text(t) for t in columns["title"][4:]] == [b"\xff\xfe python", b"python\x85list"]
    assert encode_text(columns["tokens"][4]) == b"caf\xe9 list" and encode_text(columns["tags"][4]) == b"python|j\xe4va"


def test_tag_prediction_features_and_targets(folder: Path, vocabularies: tuple[list[str], list[str]]) -> None:
    words, tags = vocabularies
    with open_stackoverflow(folder, "train") as reader:
        data = TagPrediction(reader, words, tags).client_data("00000001")
        all_tokens = TagPrediction(reader, words, tags, normalization="all_tokens").client_data("00000001")
        single = TagPrediction(reader, words, tags, single_label=True).client_data("00000001")
    np.testing.assert_allclose(data.x.numpy(), np.float32(X_IN_VOCAB), rtol=1e-6)
    np.testing.assert_allclose(all_tokens.x.numpy(), np.float32(X_ALL_TOKENS), rtol=1e-6)
    np.testing.assert_array_equal(data.y.numpy(), np.float32(Y))
    assert single.y.tolist() == [0, 0, 0, 2, 0, 0]  # c# twice beats java once; no tag: 0, as AdaDPS's argmax


def test_next_word_prediction_splits_on_the_space_byte_only(
    folder: Path, vocabularies: tuple[list[str], list[str]]
) -> None:
    with open_stackoverflow(folder, "train") as reader:
        data = NextWordPrediction(reader, vocabularies[0], sequence_length=4).client_data("00000001")
    expected = torch.tensor(NEXT_WORD)
    assert torch.equal(data.x, expected[:, :-1]) and torch.equal(data.y, expected[:, 1:])


def test_verify_finds_nothing_a_run_refuses(folder: Path) -> None:
    for path in sorted(folder.iterdir()):
        report = inspect_path(path, deep=True)
        assert report is not None and report.problems == [], (path, report.problems)


def test_a_tag_listed_twice_is_one_true_tag_for_the_metrics() -> None:
    # Keras's Recall(top_k=5) casts the labels to bool: the 2.0 of python|python is one true tag, not two.
    hits, total = recall_at_k(torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[2.0, 0.0, 0.0]]), k=1)
    assert (hits.item(), total.item()) == (1, 1)


def test_a_vocabulary_entry_without_utf8_is_refused(tmp_path: Path) -> None:
    # JSON can escape a lone surrogate; TensorFlow cannot make it a tf.string, so TFF cannot build its table.
    path = tmp_path / "stackoverflow.tag_count"
    path.write_text('{"python": 5, "j\\udce4va": 4}', encoding="utf-8")
    assert list(load_tag_counts(path, 1)) == ["python"]  # not among the tags kept: not looked up
    with pytest.raises(DatasetError, match=r"stackoverflow.tag_count: tag 'j\\udce4va' holds a lone surrogate"):
        load_tag_counts(path, 2)
    with pytest.raises(UnicodeEncodeError):
        vocab_index(["python", "j\udce4va"])
