"""Corrupted data files, chosen by Hypothesis: every reader either reads every client or raises a DatasetError
naming the file; never an exception from inside h5py, sqlite3 or lzma (issue 8, "bad input"). And ``fedpub data
verify`` reports a problem in every file a reader refuses (issue 20: it never says OK for a file a run refuses).

Each file is written once with the project's writers, then copied and corrupted per example: truncated, bytes
flipped, groups or datasets deleted, replaced by links or by arrays of another dtype or shape, clients emptied,
SQL rows and tables edited, lzma streams cut or filled with something else.
"""

from __future__ import annotations

import json
import lzma
import shutil
import sqlite3
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedpub.data.base import DatasetError
from fedpub.data.emnist import EmnistH5
from fedpub.data.emnist_sqlite import EmnistSqlite
from fedpub.data.emnist_writers import write_emnist_h5, write_emnist_sqlite
from fedpub.data.stackoverflow import (
    FIELDS,
    StackOverflowH5,
    StackOverflowSqlite,
    load_tag_counts,
    load_word_counts,
)
from fedpub.data.stackoverflow_writers import (
    SyntheticStackOverflowSpec,
    synthetic_examples,
    write_stackoverflow_h5,
    write_stackoverflow_sqlite,
)
from fedpub.simulations.tools.data_inspect import inspect_path

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EMNIST = {f"f000{i}_0{i}": (np.full((n, 28, 28), 0.5, np.float32), np.arange(n) % 10) for i, n in enumerate((3, 1, 2))}
STACKOVERFLOW = synthetic_examples(SyntheticStackOverflowSpec(num_clients=3, min_examples=1, max_examples=3, seed=5))


def read_emnist_h5(path: Path) -> None:
    with EmnistH5(path, num_classes=10) as ds:
        for client_id in ds.client_ids:
            assert len(ds.client_data(client_id)) == ds.num_examples(client_id)


def read_stackoverflow(reader: StackOverflowH5 | StackOverflowSqlite) -> None:
    with reader:
        for client_id in reader.client_ids:
            assert len(reader.examples(client_id)) == reader.num_examples(client_id)


def read_emnist_sqlite(path: Path) -> None:
    for split in ("digits_only_train", "digits_only_test"):
        with EmnistSqlite(path, split) as ds:
            for client_id in ds.client_ids:
                assert len(ds.client_data(client_id)) == ds.num_examples(client_id)


def read_stackoverflow_sqlite(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a dropped index only makes reads slow
        for split in ("train", "test"):
            read_stackoverflow(StackOverflowSqlite(path, split))


def reads_or_names_the_file(path: Path, read: Callable[[Path], None], named: Path | None = None) -> None:
    """``read(path)`` either succeeds or raises a DatasetError whose message names ``named`` (default: the file);
    and ``fedpub data verify`` never says OK for a file the read refused."""
    try:
        read(path)
    except DatasetError as error:
        event("DatasetError")
        assert str(named or path) in str(error)
        report = inspect_path(path, deep=True)
        assert report is not None and report.problems, f"verify finds nothing wrong, the reader refused: {error}"
    else:
        event("read")


@contextmanager
def corrupted_copy(original: Path) -> Iterator[Path]:
    """A copy of ``original`` under the same name in a fresh folder, removed afterwards."""
    with tempfile.TemporaryDirectory() as folder:
        yield Path(shutil.copy(original, Path(folder) / original.name))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One valid file of each format, written by the project's writers."""
    root = tmp_path_factory.mktemp("valid")
    so_test = {cid: examples[:1] for cid, examples in list(STACKOVERFLOW.items())[:1]}
    return {
        "emnist_h5": write_emnist_h5(root / "fed_emnist_digitsonly_train.h5", EMNIST),
        "stackoverflow_h5": write_stackoverflow_h5(root / "stackoverflow_train.h5", STACKOVERFLOW),
        "emnist_sqlite": write_emnist_sqlite(
            root / "emnist_all.sqlite", {"digits_only_train": EMNIST, "digits_only_test": EMNIST}
        ),
        "stackoverflow_sqlite": write_stackoverflow_sqlite(
            root / "stackoverflow.sqlite", {"train": STACKOVERFLOW, "test": so_test}
        ),
    }


# ---------------------------------------------------------------------------------------------------------------
# Byte-level corruption (any format).

byte_edits = st.lists(
    st.one_of(
        st.tuples(st.just("truncate"), st.floats(0, 1)),
        # Offsets as a fraction of the size, often in the first pages, where the metadata lies.
        st.tuples(st.just("flip"), st.floats(0, 1) | st.floats(0, 0.1), st.integers(1, 255)),
    ),
    min_size=1,
    max_size=4,
)


def corrupt_bytes(path: Path, edits: list[tuple]) -> None:
    data = bytearray(path.read_bytes())
    for edit in edits:
        if edit[0] == "truncate":
            del data[int(edit[1] * len(data)) :]
        elif data:
            data[min(int(edit[1] * len(data)), len(data) - 1)] ^= edit[2]
    path.write_bytes(bytes(data))


@SETTINGS
@given(
    kind=st.sampled_from(["emnist_h5", "stackoverflow_h5", "emnist_sqlite", "stackoverflow_sqlite"]), edits=byte_edits
)
@example(kind="stackoverflow_h5", edits=[("flip", 0.09375, 1)])  # h5py: RuntimeError listing the clients
@example(kind="stackoverflow_h5", edits=[("flip", 0.125, 1)])  # h5py: RuntimeError checking a client exists
@example(kind="emnist_sqlite", edits=[("flip", 0.052734375, 128)])  # sqlite3: UnicodeDecodeError in the schema
@example(kind="emnist_sqlite", edits=[("flip", 0.234375, 1)])  # the index disagrees with the table: verify must say so
def test_bytes_flipped_or_truncated(files: dict[str, Path], kind: str, edits: list[tuple]) -> None:
    read = {
        "emnist_h5": read_emnist_h5,
        "stackoverflow_h5": lambda path: read_stackoverflow(StackOverflowH5(path)),
        "emnist_sqlite": read_emnist_sqlite,
        "stackoverflow_sqlite": read_stackoverflow_sqlite,
    }[kind]
    with corrupted_copy(files[kind]) as path:
        corrupt_bytes(path, edits)
        reads_or_names_the_file(path, read)


# ---------------------------------------------------------------------------------------------------------------
# HDF5: structure edited with h5py.

replacement_arrays = hnp.arrays(
    dtype=st.sampled_from(
        [np.float32, np.float64, np.int8, np.uint8, np.int32, np.int64, np.bool_, "S3", "complex64",
         np.dtype([("a", np.int32), ("b", np.float32)])]
    ),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
) | st.lists(st.text(st.characters(min_codepoint=1, max_codepoint=127), max_size=4).map(str.encode), max_size=3).map(lambda v: np.array(v, dtype=h5py.string_dtype("ascii")))


def h5_edits(clients: list[str], fields: tuple[str, ...]) -> st.SearchStrategy[list[tuple]]:
    targets = st.one_of(
        st.just("examples"),
        st.sampled_from([f"examples/{c}" for c in clients]),
        st.sampled_from([f"examples/{c}/{f}" for c in clients for f in fields]),
    )
    return st.lists(
        st.one_of(
            st.tuples(st.just("delete"), targets),
            st.tuples(st.just("replace"), targets, replacement_arrays),
            st.tuples(st.just("dangling_link"), targets),
            st.tuples(st.just("external_link"), targets),
            st.tuples(st.just("empty_client"), st.sampled_from(clients)),
        ),
        min_size=1,
        max_size=3,
    )


def edit_h5(path: Path, edits: list[tuple], fields: tuple[str, ...]) -> None:
    with h5py.File(path, "a") as f:
        for kind, target, *arguments in edits:
            if kind == "empty_client":
                target = f"examples/{target}"
                if isinstance(f.get(target), h5py.Group):
                    group = f[target]
                    for name in fields:
                        old = group.get(name)
                        dtype = old.dtype if isinstance(old, h5py.Dataset) else np.float32
                        if name in group:
                            del group[name]
                        group.create_dataset(name, shape=(0, 28, 28) if name == "pixels" else (0,), dtype=dtype)
                continue
            parent = target.rsplit("/", 1)[0] if "/" in target else "/"
            if not isinstance(f.get(parent), h5py.Group):
                continue  # an earlier edit removed or replaced the parent
            if target in f or f.get(target, getlink=True) is not None:
                del f[target]
            if kind == "replace":
                f.create_dataset(target, data=arguments[0])
            elif kind == "dangling_link":
                f[target] = h5py.SoftLink("/nowhere")
            elif kind == "external_link":
                f[target] = h5py.ExternalLink("missing_file.h5", "/examples")


@SETTINGS
@given(data=st.data())
def test_emnist_h5_structure_edited(files: dict[str, Path], data: st.DataObject) -> None:
    edits = data.draw(h5_edits(list(EMNIST), ("label", "pixels")))
    with corrupted_copy(files["emnist_h5"]) as path:
        edit_h5(path, edits, ("label", "pixels"))
        if data.draw(st.booleans()):
            corrupt_bytes(path, data.draw(byte_edits))
        reads_or_names_the_file(path, read_emnist_h5)


@SETTINGS
@given(data=st.data())
def test_stackoverflow_h5_structure_edited(files: dict[str, Path], data: st.DataObject) -> None:
    edits = data.draw(h5_edits(list(STACKOVERFLOW), FIELDS))
    with corrupted_copy(files["stackoverflow_h5"]) as path:
        edit_h5(path, edits, FIELDS)
        reads_or_names_the_file(path, lambda p: read_stackoverflow(StackOverflowH5(p)))


# ---------------------------------------------------------------------------------------------------------------
# SQLite: tables, columns and rows edited with SQL.

sql_values = st.none() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=6) | st.binary(max_size=6)
sql_columns = st.sampled_from(
    [("examples", c) for c in ("split_name", "client_id", "serialized_example_proto")]
    + [("client_metadata", c) for c in ("client_id", "split_name", "num_examples")]
)
sql_edits = st.lists(
    st.one_of(
        st.tuples(st.just("drop_table"), st.sampled_from(["examples", "client_metadata"])),
        st.tuples(st.just("drop_column"), sql_columns),
        st.tuples(st.sampled_from(["set", "set_text"]), sql_columns, sql_values, st.integers(0, 12)),  # row 0: all
        st.tuples(st.just("delete"), st.sampled_from(["examples", "client_metadata"]), st.integers(1, 12)),
        st.tuples(st.just("insert_metadata"), sql_values, st.sampled_from(["train", "digits_only_train"]), sql_values),
        st.just(("drop_indexes",)),
    ),
    min_size=1,
    max_size=3,
)


def edit_sqlite(path: Path, edits: list[tuple]) -> None:
    connection = sqlite3.connect(path)
    try:
        for kind, *arguments in edits:
            try:
                with connection:
                    if kind == "drop_table":
                        connection.execute(f"DROP TABLE {arguments[0]}")
                    elif kind == "drop_column":
                        connection.execute("ALTER TABLE {} DROP COLUMN {}".format(*arguments[0]))
                    elif kind in ("set", "set_text"):  # set_text: the value's bytes as TEXT, maybe not UTF-8
                        (table, column), value, row = arguments
                        where = f" WHERE rowid = {row}" if row else ""
                        cell = "CAST(? AS TEXT)" if kind == "set_text" else "?"
                        connection.execute(f"UPDATE {table} SET {column} = {cell}{where}", (value,))
                    elif kind == "delete":
                        connection.execute(f"DELETE FROM {arguments[0]} WHERE rowid = ?", (arguments[1],))
                    elif kind == "insert_metadata":
                        connection.execute("INSERT INTO client_metadata VALUES (?, ?, ?)", tuple(arguments))
                    else:
                        for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'index'"):
                            connection.execute(f"DROP INDEX {name}")
            except sqlite3.Error:
                pass  # an earlier edit dropped the table or column, or a NOT NULL constraint refused the value
    finally:
        connection.close()


@SETTINGS
@given(kind=st.sampled_from(["emnist_sqlite", "stackoverflow_sqlite"]), edits=sql_edits)
def test_sqlite_tables_edited(files: dict[str, Path], kind: str, edits: list[tuple]) -> None:
    read = read_emnist_sqlite if kind == "emnist_sqlite" else read_stackoverflow_sqlite
    with corrupted_copy(files[kind]) as path:
        edit_sqlite(path, edits)
        reads_or_names_the_file(path, read)


# ---------------------------------------------------------------------------------------------------------------
# .lzma: cut or damaged streams, and valid streams holding something else. Decompressed beside the .lzma, so a
# message may name the .lzma or its decompressed copy.

lzma_payloads = st.one_of(
    st.just("database"),
    st.binary(max_size=64),
    st.sampled_from([b"", b"SQLite format 3\x00", b"\x89HDF\r\n\x1a\n"]).map(lambda head: head + bytes(200)),
    st.floats(0, 1).map(lambda fraction: ("database prefix", fraction)),
)


@SETTINGS
@given(
    kind=st.sampled_from(["emnist_sqlite", "stackoverflow_sqlite"]),
    container=st.sampled_from([lzma.FORMAT_ALONE, lzma.FORMAT_XZ]),
    payload=lzma_payloads,
    damage=st.none() | byte_edits,
)
def test_lzma_streams(files: dict[str, Path], kind: str, container: int, payload: object, damage: list | None) -> None:
    database = files[kind].read_bytes()
    if payload == "database":
        payload = database
    elif isinstance(payload, tuple):
        payload = database[: int(payload[1] * len(database))]
    read = read_emnist_sqlite if kind == "emnist_sqlite" else read_stackoverflow_sqlite
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{files[kind].name}.lzma"
        path.write_bytes(lzma.compress(payload, format=container))
        if damage:
            corrupt_bytes(path, damage)
        reads_or_names_the_file(path, read, named=path.with_suffix(""))


# ---------------------------------------------------------------------------------------------------------------
# StackOverflow's two count files.


@SETTINGS
@given(
    content=st.binary(max_size=40)
    | st.text(max_size=40).map(str.encode)
    | st.lists(st.tuples(st.text(max_size=5), st.text(max_size=4)), max_size=4).map(
        lambda lines: "".join(f"{a} {b}\n" for a, b in lines).encode()
    )
    | st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
        max_leaves=8,
    ).map(lambda value: json.dumps(value).encode()),
    which=st.sampled_from(["word_count", "tag_count"]),
)
def test_count_files(content: bytes, which: str) -> None:
    load = load_word_counts if which == "word_count" else load_tag_counts
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"stackoverflow.{which}"
        path.write_bytes(content)
        reads_or_names_the_file(path, lambda p: load(p, 3))


@pytest.mark.parametrize(
    ("which", "content"),
    [
        ("word_count", "the ²\n".encode()),  # str.isdigit() but not int()
        ("tag_count", b"[" * 100_000),  # json recursion
        ("tag_count", b'{"python": ' + b"7" * 5000 + b"}"),  # past Python's int digit limit
    ],
)
def test_count_file_edge_cases(tmp_path: Path, which: str, content: bytes) -> None:
    path = tmp_path / f"stackoverflow.{which}"
    path.write_bytes(content)
    with pytest.raises(DatasetError, match=str(path)):
        (load_word_counts if which == "word_count" else load_tag_counts)(path)
