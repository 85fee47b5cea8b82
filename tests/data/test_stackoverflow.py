"""StackOverflow readers (HDF5, SQLite, .sqlite.lzma) and the count-file loaders: exact round trips through the
writers, the same logical data in every layout, and errors that name the file."""

from __future__ import annotations

import json
import lzma
import os
import pickle
import sqlite3
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest

from fedpub.data.base import DatasetError
from fedpub.data.stackoverflow import (
    FIELDS,
    StackOverflowH5,
    StackOverflowSqlite,
    add_client_index,
    load_tag_counts,
    load_word_counts,
    open_stackoverflow,
)
from fedpub.data import stackoverflow_writers
from fedpub.data.stackoverflow_writers import (
    SyntheticStackOverflowSpec,
    edge_case_dataset,
    ensure_synthetic_stackoverflow,
    synthetic_examples,
    write_stackoverflow_h5,
    write_stackoverflow_sqlite,
    write_synthetic_stackoverflow,
    write_tag_count,
    write_word_count,
)
from fedpub.data.tf_example import encode_example

EDGE = edge_case_dataset()
SMALL = SyntheticStackOverflowSpec(num_clients=12, min_examples=0, max_examples=4, seed=3)


def _all_examples(reader: StackOverflowH5 | StackOverflowSqlite) -> dict[str, list]:
    return {cid: reader.examples(cid) for cid in reader.client_ids}


@pytest.fixture
def edge_h5(tmp_path: Path) -> Path:
    return write_stackoverflow_h5(tmp_path / "stackoverflow_train.h5", EDGE.clients)


@pytest.fixture
def edge_sqlite(tmp_path: Path) -> Path:
    test = {"00000007": EDGE.clients["00000007"][:1]}
    return write_stackoverflow_sqlite(tmp_path / "stackoverflow.sqlite", {"train": EDGE.clients, "test": test})


def test_h5_round_trip_is_exact(edge_h5: Path) -> None:
    with StackOverflowH5(edge_h5) as reader:
        assert reader.client_ids == sorted(EDGE.clients) == ["00000003", "00000007", "00000042"]
        assert _all_examples(reader) == EDGE.clients
        for cid, examples in EDGE.clients.items():
            assert reader.num_examples(cid) == len(examples)
        example = reader.examples("00000007")[0]
        assert example["score"] == -3 and isinstance(example["score"], int)
        assert example["tags"] == "vb . net|c#" and "<URL>" in example["tokens"]
        assert reader.columns("00000003", ("tokens",)) == {"tokens": [e["tokens"] for e in EDGE.clients["00000003"]]}


def test_h5_storage_is_tff_like(edge_h5: Path) -> None:
    with h5py.File(edge_h5, "r") as f:
        group = f["examples/00000007"]
        assert sorted(group) == list(FIELDS)
        assert group["score"].dtype == np.int64
        info = h5py.check_string_dtype(group["tokens"].dtype)
        assert info is not None and info.encoding == "ascii" and info.length is None
        assert isinstance(group["tokens"][0], bytes)  # h5py reads vlen ASCII as bytes, as TFF's readers saw it


@pytest.mark.parametrize("storage", ["fixed_bytes", "vlen_utf8", "int32_score"])
def test_h5_accepts_other_string_and_int_storage(tmp_path: Path, storage: str) -> None:
    examples = EDGE.clients["00000007"]
    path = tmp_path / "stackoverflow_test.h5"
    with h5py.File(path, "w") as f:
        group = f.create_group("examples/00000007")
        for name in FIELDS:
            values = [e[name] for e in examples]  # type: ignore[literal-required]
            if name == "score":
                group.create_dataset(name, data=np.array(values, dtype=np.int32 if storage == "int32_score" else None))
            elif storage == "vlen_utf8":
                group.create_dataset(name, data=np.array(values, dtype=h5py.string_dtype("utf-8")))
            else:
                group.create_dataset(name, data=np.array([v.encode() for v in values]))  # fixed-length 'S'
    with StackOverflowH5(path) as reader:
        assert reader.examples("00000007") == examples


def test_sqlite_round_trip_and_splits(edge_sqlite: Path) -> None:
    with StackOverflowSqlite(edge_sqlite, "train") as train, StackOverflowSqlite(edge_sqlite, "test") as test:
        assert train.client_ids == sorted(EDGE.clients)
        assert _all_examples(train) == EDGE.clients
        assert test.client_ids == ["00000007"] and test.examples("00000007") == EDGE.clients["00000007"][:1]
        assert train.num_examples("00000042") == 7 and test.num_examples("00000007") == 1
        with pytest.raises(KeyError, match="00000042"):
            test.num_examples("00000042")


def test_same_logical_data_in_every_layout(tmp_path: Path) -> None:
    clients = {**synthetic_examples(SMALL), **EDGE.clients}
    h5 = write_stackoverflow_h5(tmp_path / "stackoverflow_train.h5", clients)
    db = write_stackoverflow_sqlite(tmp_path / "stackoverflow.sqlite", {"train": clients})
    packed = write_stackoverflow_sqlite(tmp_path / "packed" / "stackoverflow.sqlite.lzma", {"train": clients})
    readers = [StackOverflowH5(h5), StackOverflowSqlite(db, "train"), StackOverflowSqlite(packed, "train")]
    try:
        assert any(len(v) == 0 for v in clients.values())  # an empty client is covered too
        for reader in readers:
            assert reader.client_ids == sorted(clients)
            assert _all_examples(reader) == clients
            assert [reader.num_examples(c) for c in reader.client_ids] == [len(clients[c]) for c in sorted(clients)]
    finally:
        for reader in readers:
            reader.close()


def test_lzma_is_decompressed_once_into_the_cache(tmp_path: Path) -> None:
    packed = write_stackoverflow_sqlite(tmp_path / "stackoverflow.sqlite.lzma", {"train": EDGE.clients})
    cache = tmp_path / "cache"
    with StackOverflowSqlite(packed, "train", cache_dir=cache) as reader:
        assert reader.path == cache / "stackoverflow.sqlite"
        assert _all_examples(reader) == EDGE.clients
    stamp = reader.path.stat().st_mtime_ns
    with StackOverflowSqlite(packed, "train", cache_dir=cache) as again:
        assert again.path.stat().st_mtime_ns == stamp  # reused, not decompressed again
    assert not [p for p in cache.iterdir() if p.name != "stackoverflow.sqlite"]  # no temporary files left


def test_xz_container_is_accepted_too(edge_sqlite: Path, tmp_path: Path) -> None:
    packed = tmp_path / "xz" / "stackoverflow.sqlite.lzma"
    packed.parent.mkdir()
    packed.write_bytes(lzma.compress(edge_sqlite.read_bytes(), format=lzma.FORMAT_XZ))
    with StackOverflowSqlite(packed, "test") as reader:
        assert reader.examples("00000007") == EDGE.clients["00000007"][:1]


def test_corrupt_lzma_names_the_file(edge_sqlite: Path, tmp_path: Path) -> None:
    packed = tmp_path / "bad" / "stackoverflow.sqlite.lzma"
    packed.parent.mkdir()
    packed.write_bytes(lzma.compress(edge_sqlite.read_bytes())[:200])
    with pytest.raises(DatasetError, match="truncated") as err:
        StackOverflowSqlite(packed, "train")
    assert str(packed) in str(err.value)


def test_open_stackoverflow_prefers_h5_then_sqlite(tmp_path: Path) -> None:
    packed = write_stackoverflow_sqlite(tmp_path / "stackoverflow.sqlite.lzma", {"heldout": EDGE.clients})
    with open_stackoverflow(tmp_path, "heldout") as reader:
        assert isinstance(reader, StackOverflowSqlite) and reader.path == packed.with_suffix("")
    write_stackoverflow_h5(tmp_path / "stackoverflow_held_out.h5", EDGE.clients)
    with open_stackoverflow(tmp_path, "heldout") as reader:
        assert isinstance(reader, StackOverflowH5)
    with pytest.raises(DatasetError, match="stackoverflow_test.h5"):
        open_stackoverflow(tmp_path / "empty", "test")
    with pytest.raises(DatasetError, match="allowed splits"):
        open_stackoverflow(tmp_path, "held_out")


def test_pickled_readers_reopen(edge_h5: Path, edge_sqlite: Path) -> None:
    for reader in (StackOverflowH5(edge_h5), StackOverflowSqlite(edge_sqlite, "train")):
        clone = pickle.loads(pickle.dumps(reader))
        assert clone.client_ids == reader.client_ids
        assert clone.examples("00000042") == EDGE.clients["00000042"]
        reader.close()
        reader.close()
        assert reader.num_examples("00000003") == 4  # a closed reader reopens on use
        assert reader.examples("00000003") == EDGE.clients["00000003"]
        reader.close()
        clone.close()


def test_synthetic_files_are_deterministic(tmp_path: Path) -> None:
    first = write_synthetic_stackoverflow(tmp_path / "a", SMALL)
    second = write_synthetic_stackoverflow(tmp_path / "b", SMALL, split="test")
    third = write_synthetic_stackoverflow(tmp_path / "c", SMALL, split="heldout", layout="sqlite")
    assert second.data.name == "stackoverflow_test.h5" and third.data.name == "stackoverflow.sqlite"
    with StackOverflowH5(first.data) as a, StackOverflowH5(second.data) as b, StackOverflowSqlite(
        third.data, "heldout"
    ) as c:
        assert a.client_ids == b.client_ids == c.client_ids and len(a.client_ids) == SMALL.num_clients
        assert all(len(cid) == 8 and cid.isdigit() for cid in a.client_ids)
        assert _all_examples(a) == _all_examples(b) == _all_examples(c) == synthetic_examples(SMALL)
    assert first.word_count.read_bytes() == second.word_count.read_bytes() == third.word_count.read_bytes()
    words, tags = load_word_counts(first.word_count), load_tag_counts(first.tag_count)
    assert len(words) == SMALL.num_words and list(words)[:2] == ["w0", "w1"]
    assert list(tags.values()) == sorted(tags.values(), reverse=True)  # the loader sorts by count...
    assert list(json.loads(first.tag_count.read_text())) != list(tags)  # ...the file, as TFF's, is not sorted
    assert synthetic_examples(SMALL) != synthetic_examples(SyntheticStackOverflowSpec(num_clients=12, seed=4))



def test_the_synthetic_count_files_count_the_words_and_tags_the_files_hold(tmp_path: Path) -> None:
    """AdaDPS's token-frequency side information is read from the word counts (fedpub issue 21): they are the
    generated tokens' and titles', most frequent first, even for topic words put at rare Zipf ranks; the tag
    counts are the generated examples' tags."""
    spec = SyntheticStackOverflowSpec(num_clients=40, min_examples=2, max_examples=6, topic_rank_offset=300,
                                      num_words=500, seed=2)
    files = write_synthetic_stackoverflow(tmp_path, spec)
    with StackOverflowH5(files.data) as reader:
        drawn = [w for example in _all_examples(reader).values() for e in example
                 for w in (*e["tokens"].split(), *e["title"].split())]
    counts = load_word_counts(files.word_count)
    assert counts == {w: drawn.count(w) for w in counts} and len(counts) == spec.num_words
    assert list(counts.values()) == sorted(counts.values(), reverse=True)
    assert sum(counts.values()) == len(drawn)
    with StackOverflowH5(files.data) as reader:
        tags = [t for example in _all_examples(reader).values() for e in example for t in e["tags"].split("|")]
    tag_counts = load_tag_counts(files.tag_count)
    assert tag_counts == {t: tags.count(t) for t in tag_counts} and len(tag_counts) == spec.num_tags
    assert sum(tag_counts.values()) == len(tags)


def test_ensured_synthetic_files_are_reused_and_never_replaced_by_another_spec(tmp_path: Path) -> None:
    test = SyntheticStackOverflowSpec(num_clients=3, max_examples=4, seed=4)
    root = ensure_synthetic_stackoverflow(tmp_path / "so", SMALL, test, test)
    files = sorted(p for p in root.iterdir())
    stamps = [p.stat().st_mtime_ns for p in files]
    assert ensure_synthetic_stackoverflow(root, SMALL, test, test) == root
    assert [p.stat().st_mtime_ns for p in files] == stamps
    more = SyntheticStackOverflowSpec(num_clients=20, min_examples=0, max_examples=4, seed=3)
    with pytest.raises(DatasetError, match="another spec .*train.*; set data.path to another folder"):
        ensure_synthetic_stackoverflow(root, more, test, test)
    assert [p.stat().st_mtime_ns for p in files] == stamps
    # files fedpub did not generate (a real download) are refused, not overwritten; an interrupted generation of
    # the same specs is redone
    real = tmp_path / "real"
    real.mkdir()
    (real / "stackoverflow_train.h5").write_bytes(b"TFF's file")
    with pytest.raises(DatasetError, match="StackOverflow files that fedpub did not generate"):
        ensure_synthetic_stackoverflow(real, SMALL, test, test)
    assert (real / "stackoverflow_train.h5").read_bytes() == b"TFF's file"
    (root / "fedpub_synthetic_stackoverflow.json").rename(root / "fedpub_synthetic_stackoverflow.partial")
    (root / "stackoverflow_test.h5").unlink()
    assert ensure_synthetic_stackoverflow(root, SMALL, test, test) == root
    assert sorted(p for p in root.iterdir()) == files



# --- count files ----------------------------------------------------------------------------------------------


def test_word_counts_keep_file_order_and_cut(tmp_path: Path) -> None:
    path = tmp_path / "stackoverflow.word_count"
    path.write_text(". 342309\nthe\t341937\nto 1\nzebra 9\n")  # separator may be a tab; order is not re-sorted
    assert load_word_counts(path) == {".": 342309, "the": 341937, "to": 1, "zebra": 9}
    assert list(load_word_counts(path, vocab_size=2)) == [".", "the"]
    assert len(load_word_counts(path, vocab_size=10_000)) == 4  # a short file gives all it has
    write_word_count(path, EDGE.word_counts)
    assert load_word_counts(path) == EDGE.word_counts


def test_tag_counts_sorted_by_count_with_stable_ties(tmp_path: Path) -> None:
    path = write_tag_count(tmp_path / "stackoverflow.tag_count", EDGE.tag_counts)
    assert list(json.loads(path.read_text())) == list(EDGE.tag_counts)  # the file itself is unsorted
    ranked = load_tag_counts(path)
    assert list(ranked) == ["python", "vb . net", "c#", "java", "python-2.7", "fortran-77"]
    assert ranked["python"] == 9
    assert list(load_tag_counts(path, vocab_size=3)) == ["python", "vb . net", "c#"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("the 12\nword\n", "line 2: expected 'word count'"),
        ("the 12\nthe 3\n", "line 2: word 'the' is listed twice"),
        ("the twelve\n", "line 1"),
        ("", "is empty"),
    ],
)
def test_bad_word_count(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "stackoverflow.word_count"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message) as err:
        load_word_counts(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [('{"html": 3', "not a JSON file"), ('["html"]', "one non-empty JSON object"), ('{"a": "3"}', "integers")],
)
def test_bad_tag_count(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "stackoverflow.tag_count"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message) as err:
        load_tag_counts(path)
    assert str(path) in str(err.value)


def test_missing_count_files_say_where_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="stackoverflow.word_count.tar.bz2") as err:
        load_word_counts(tmp_path / "stackoverflow.word_count")
    assert str(tmp_path) in str(err.value)
    with pytest.raises(DatasetError, match="stackoverflow.tag_count.tar.bz2"):
        load_tag_counts(tmp_path / "stackoverflow.tag_count")
    with pytest.raises(ValueError, match="vocab_size"):
        load_word_counts(tmp_path / "x", vocab_size=0)


# --- HDF5 errors ----------------------------------------------------------------------------------------------


def test_h5_missing_not_hdf5_and_no_examples(tmp_path: Path) -> None:
    path = tmp_path / "stackoverflow_train.h5"
    with pytest.raises(DatasetError, match="stackoverflow.tar.bz2") as err:
        StackOverflowH5(path)
    assert str(path) in str(err.value)
    path.write_text("not HDF5")
    with pytest.raises(DatasetError, match="not a readable HDF5 file") as err:
        StackOverflowH5(path)
    assert str(path) in str(err.value)
    path.unlink()
    with h5py.File(path, "w") as f:
        f.create_group("other")
    with pytest.raises(DatasetError, match="no 'examples' group"):
        StackOverflowH5(path)


def _edit(path: Path, edit: str) -> None:
    with h5py.File(path, "a") as f:
        group = f["examples/00000007"]
        if edit == "missing":
            del group["title"]
        elif edit == "score_dtype":
            del group["score"]
            group.create_dataset("score", data=np.array([1.5, 2.0]))
        elif edit == "text_dtype":
            del group["tokens"]
            group.create_dataset("tokens", data=np.array([1, 2]))
        elif edit == "lengths":
            del group["type"]
            group.create_dataset("type", data=np.array([b"question"], dtype=h5py.string_dtype("ascii")))
        elif edit == "shape":
            del group["tags"]
            group.create_dataset("tags", data=np.array([[b"a"], [b"b"]]))
        elif edit == "group_as_field":
            del group["tokens"]
            group.create_group("tokens")
        elif edit == "dataset_as_client":
            del f["examples/00000007"]
            f["examples"].create_dataset("00000007", data=np.arange(3))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("missing", "no 'title' dataset"),
        ("score_dtype", "'score' has dtype float64"),
        ("text_dtype", "'tokens' has dtype int64, expected strings"),
        ("lengths", "different lengths"),
        ("shape", r"'tags' has shape \(2, 1\)"),
        ("group_as_field", "'tokens' is not a dataset"),
        ("dataset_as_client", "is not a group"),
    ],
)
def test_h5_malformed_client(edge_h5: Path, edit: str, message: str) -> None:
    _edit(edge_h5, edit)
    with StackOverflowH5(edge_h5) as reader:
        assert reader.examples("00000042") == EDGE.clients["00000042"]  # other clients stay readable
        with pytest.raises(DatasetError, match=message) as err:
            reader.examples("00000007")
    assert str(edge_h5) in str(err.value) and "00000007" in str(err.value)


def test_h5_unknown_client(edge_h5: Path) -> None:
    with StackOverflowH5(edge_h5) as reader, pytest.raises(KeyError, match="99999999"):
        reader.columns("99999999")
    with StackOverflowH5(edge_h5) as reader, pytest.raises(ValueError, match="unknown StackOverflow field"):
        reader.columns("00000007", ("body",))


# --- SQLite errors --------------------------------------------------------------------------------------------


def test_sqlite_missing_and_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "stackoverflow.sqlite"
    with pytest.raises(DatasetError, match="stackoverflow.sqlite.lzma") as err:
        StackOverflowSqlite(path, "train")
    assert str(path) in str(err.value)
    path.write_text("not a database at all")
    with pytest.raises(DatasetError, match="not a SQLite database") as err:
        StackOverflowSqlite(path, "train")
    assert str(path) in str(err.value)


def test_sqlite_unknown_or_absent_split(edge_sqlite: Path) -> None:
    with pytest.raises(DatasetError, match="allowed splits are train, heldout, test"):
        StackOverflowSqlite(edge_sqlite, "held_out")
    with pytest.raises(DatasetError, match=r"no clients in split 'heldout' \(splits present: test, train\)") as err:
        StackOverflowSqlite(edge_sqlite, "heldout")
    assert str(edge_sqlite) in str(err.value)


def _execute(path: Path, *statements: str, parameters: tuple = ()) -> None:
    connection = sqlite3.connect(path)
    with connection:
        for statement in statements:
            connection.execute(statement, parameters)
    connection.close()


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("DROP TABLE client_metadata", "no 'client_metadata' table"),
        ("ALTER TABLE examples DROP COLUMN serialized_example_proto", "lacks column"),
    ],
)
def test_sqlite_bad_schema(edge_sqlite: Path, statement: str, message: str) -> None:
    _execute(edge_sqlite, "DROP INDEX IF EXISTS idx_client_id_split", statement)
    with pytest.raises(DatasetError, match=message) as err:
        StackOverflowSqlite(edge_sqlite, "train")
    assert str(edge_sqlite) in str(err.value)


def test_sqlite_conflicting_metadata(edge_sqlite: Path) -> None:
    _execute(edge_sqlite, "INSERT INTO client_metadata VALUES ('00000042', 'train', 3)")
    with pytest.raises(DatasetError, match="conflicting counts 3 and 7|conflicting counts 7 and 3"):
        StackOverflowSqlite(edge_sqlite, "train")


def _replace_first_example(path: Path, blob: bytes) -> None:
    _execute(
        path,
        "UPDATE examples SET serialized_example_proto = ? WHERE rowid = (SELECT MIN(rowid) FROM examples "
        "WHERE client_id = '00000007' AND split_name = 'train')",
        parameters=(blob,),
    )


def _proto(**overrides: list) -> bytes:
    features: dict[str, list] = {name: [b"x"] for name in FIELDS}
    features["score"] = [1]
    features.update(overrides)
    return encode_example({k: v for k, v in features.items() if v != []})


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x0a\x05garbage-not-a-proto", "not a valid tf.train.Example"),
        (_proto(title=[]), "no 'title' feature"),
        (_proto(score=[b"1"]), "feature 'score' is .*expected one int64"),
        (_proto(tokens=[b"a", b"b"]), "feature 'tokens' is .*expected one bytes"),
    ],
)
def test_sqlite_malformed_example(edge_sqlite: Path, blob: bytes, message: str) -> None:
    _replace_first_example(edge_sqlite, blob)
    with StackOverflowSqlite(edge_sqlite, "train") as reader:
        assert reader.examples("00000042") == EDGE.clients["00000042"]
        with pytest.raises(DatasetError, match=message) as err:
            reader.examples("00000007")
    assert str(edge_sqlite) in str(err.value) and "00000007" in str(err.value) and "example 0" in str(err.value)


def test_sqlite_count_mismatch(edge_sqlite: Path) -> None:
    _execute(edge_sqlite, "DELETE FROM examples WHERE client_id = '00000003' AND rowid % 2 = 0")
    with StackOverflowSqlite(edge_sqlite, "train") as reader, pytest.raises(
        DatasetError, match="client_metadata says 4"
    ):
        reader.examples("00000003")


def test_sqlite_without_index_warns_and_index_can_be_added(tmp_path: Path) -> None:
    path = write_stackoverflow_sqlite(tmp_path / "stackoverflow.sqlite", {"train": EDGE.clients}, index=False)
    with pytest.warns(UserWarning, match=r"no index on client_id \(TFF's writer creates none\), so every client read "
                      r"scans the whole table, 0 MiB: about 0.0 s per client .*\.add_client_index adds one"):
        reader = StackOverflowSqlite(path, "train")
    assert _all_examples(reader) == EDGE.clients  # correct, only slower
    reader.close()
    add_client_index(path)
    add_client_index(path)  # idempotent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StackOverflowSqlite(path, "train").close()


def test_the_copy_decompressed_from_lzma_is_indexed(tmp_path: Path) -> None:
    """TFF's published .sqlite.lzma has no index; the copy fedpub decompresses gets one before it is put in place,
    and reads the same examples in the same order as the unindexed file."""
    splits = {"train": EDGE.clients}
    packed = write_stackoverflow_sqlite(tmp_path / "stackoverflow.sqlite.lzma", splits, index=False)
    plain = write_stackoverflow_sqlite(tmp_path / "plain" / "stackoverflow.sqlite", splits, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with StackOverflowSqlite(packed, "train") as reader:
            assert reader.path == tmp_path / "stackoverflow.sqlite"
            indexed = _all_examples(reader)
    with pytest.warns(UserWarning, match="no index"), StackOverflowSqlite(plain, "train") as unindexed:
        assert indexed == _all_examples(unindexed) == EDGE.clients
    with sqlite3.connect(tmp_path / "stackoverflow.sqlite") as connection:
        indexes = connection.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
    connection.close()
    assert indexes == [("idx_client_id_split",)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "stackoverflow.sqlite", "stackoverflow.sqlite.lzma"]


def test_writers_reject_bad_input(tmp_path: Path) -> None:
    good = EDGE.clients["00000007"][0]
    with pytest.raises(ValueError, match="title .* has no bytes"):  # a surrogate that stands for no byte
        write_stackoverflow_h5(tmp_path / "a.h5", {"00000001": [{**good, "title": "caf\ud800"}]})
    with pytest.raises(ValueError, match="title b'x' is not a str"):
        write_stackoverflow_h5(tmp_path / "a.h5", {"00000001": [{**good, "title": b"x"}]})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="score"):
        write_stackoverflow_h5(tmp_path / "a.h5", {"00000001": [{**good, "score": 1.0}]})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="fields"):
        write_stackoverflow_h5(tmp_path / "a.h5", {"00000001": [{"tokens": "x"}]})  # type: ignore[list-item]
    with pytest.raises(ValueError, match="client ids"):
        write_stackoverflow_h5(tmp_path / "a.h5", {"a/b": [good]})
    with pytest.raises(ValueError, match="unknown StackOverflow split"):
        write_stackoverflow_sqlite(tmp_path / "a.sqlite", {"held_out": {"00000001": [good]}})
    assert not os.listdir(tmp_path)  # failed writes leave nothing behind


def test_runs_asking_for_the_same_synthetic_folder_at_once_generate_it_once(tmp_path: Path, monkeypatch) -> None:
    """``--jobs`` starts runs together: one generates, the others wait for it and reuse the files (without the
    lock two generated at once and one removed the other's progress marker: FileNotFoundError)."""
    generated, original = [], stackoverflow_writers.write_synthetic_stackoverflow

    def slow_write(*args, **kwargs):
        generated.append(1)
        time.sleep(0.5)  # long enough for the other caller to arrive while this one generates
        return original(*args, **kwargs)

    monkeypatch.setattr(stackoverflow_writers, "write_synthetic_stackoverflow", slow_write)
    test = SyntheticStackOverflowSpec(num_clients=3, max_examples=4, seed=4)
    with ThreadPoolExecutor(3) as pool:
        roots = list(pool.map(lambda _: ensure_synthetic_stackoverflow(tmp_path / "so", SMALL, test, test), range(3)))
    assert roots == [tmp_path / "so"] * 3 and generated == [1]
    assert (tmp_path / "so" / "fedpub_synthetic_stackoverflow.json").is_file()
