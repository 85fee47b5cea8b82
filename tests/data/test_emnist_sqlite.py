"""EmnistSqlite reads TFF's SQLite layout exactly like EmnistH5 reads the HDF5 one, lazily, with named errors."""

from __future__ import annotations

import lzma
import os
import pickle
import sqlite3
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from fedpub.config import parse_config
from fedpub.data.base import DatasetError, FederatedDataset
from fedpub.data.emnist import EmnistH5, load_emnist_split
from fedpub.data import download as download_module
from fedpub.data.download import ensure_decompressed
from fedpub.data.emnist_sqlite import EmnistSqlite, load_emnist_sqlite
from fedpub.data.tff_sqlite import has_client_index
from fedpub.data.emnist_writers import read_emnist_clients, write_emnist_h5, write_emnist_sqlite
from fedpub.data.users import load_data
from fedpub.data.tf_example import encode_example


@pytest.fixture(scope="module")
def logical(tiny_emnist_dir: Path) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The synthetic data as {split: {client: (pixels, labels)}}, clients in reverse order (readers must sort)."""
    train, test = load_emnist_split(tiny_emnist_dir, only_digits=True)
    with train, test:
        out = {"train": read_emnist_clients(train), "test": read_emnist_clients(test)}
    return {split: dict(reversed(list(clients.items()))) for split, clients in out.items()}


@pytest.fixture(scope="module")
def both_layouts(tmp_path_factory: pytest.TempPathFactory, logical: dict) -> tuple[Path, Path]:
    """The same data as TFF HDF5 files (in a folder) and as emnist_all.sqlite."""
    root = tmp_path_factory.mktemp("layouts")
    write_emnist_h5(root / "fed_emnist_digitsonly_train.h5", logical["train"])
    write_emnist_h5(root / "fed_emnist_digitsonly_test.h5", logical["test"])
    sqlite_path = write_emnist_sqlite(
        root / "emnist_all.sqlite",
        {"digits_only_train": logical["train"], "digits_only_test": logical["test"]},
    )
    return root, sqlite_path


def _assert_same(a: FederatedDataset, b: FederatedDataset) -> None:
    assert a.client_ids == b.client_ids and a.num_classes == b.num_classes
    for client_id in a.client_ids:
        da, db = a.client_data(client_id), b.client_data(client_id)
        assert a.num_examples(client_id) == b.num_examples(client_id) == len(da) == len(db)
        assert da.x.dtype == db.x.dtype == torch.float32 and da.x.shape == db.x.shape == (len(da), 1, 28, 28)
        assert da.y.dtype == db.y.dtype == torch.int64
        torch.testing.assert_close(da.x, db.x, rtol=0, atol=0)
        torch.testing.assert_close(da.y, db.y, rtol=0, atol=0)


def test_hdf5_and_sqlite_read_back_identical(both_layouts: tuple[Path, Path], logical: dict) -> None:
    root, sqlite_path = both_layouts
    h5_train, h5_test = load_emnist_split(root, only_digits=True)
    sql_train, sql_test = load_emnist_sqlite(sqlite_path, only_digits=True)
    with h5_train, h5_test, sql_train, sql_test:
        assert isinstance(sql_train, FederatedDataset)
        assert sql_train.client_ids == sorted(logical["train"]) and sql_train.split == "digits_only_train"
        _assert_same(h5_train, sql_train)
        _assert_same(h5_test, sql_test)
        first = sql_train.client_ids[0]
        np.testing.assert_array_equal(sql_train.client_data(first).x.squeeze(1).numpy(), logical["train"][first][0])


def test_all_splits_have_62_classes(tmp_path: Path, logical: dict) -> None:
    path = write_emnist_sqlite(tmp_path / "emnist_all.sqlite", {"all_train": logical["train"]})
    with EmnistSqlite(path, "all_train") as ds:
        assert ds.num_classes == 62 and ds.client_ids == sorted(logical["train"])


def test_num_examples_comes_from_metadata(both_layouts: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _, sqlite_path = both_layouts
    with EmnistSqlite(sqlite_path, "digits_only_train") as ds:
        monkeypatch.setattr(ds._db, "query", lambda *a: pytest.fail("num_examples queried the database"))
        assert sum(ds.num_examples(c) for c in ds.client_ids) > 0
        with pytest.raises(KeyError, match="nobody"):
            ds.num_examples("nobody")


def test_pickle_reopens(both_layouts: tuple[Path, Path]) -> None:
    _, sqlite_path = both_layouts
    with EmnistSqlite(sqlite_path, "digits_only_test") as ds:
        clone = pickle.loads(pickle.dumps(ds))
        with clone:
            _assert_same(ds, clone)


def test_lzma_is_decompressed_once_atomically(tmp_path: Path, logical: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    splits = {"digits_only_train": logical["train"], "digits_only_test": logical["test"]}
    plain = write_emnist_sqlite(tmp_path / "plain" / "emnist_all.sqlite", splits)
    packed = write_emnist_sqlite(tmp_path / "emnist_all.sqlite.lzma", splits)
    assert packed.read_bytes()[:1] == b"\x5d"  # LZMA_Alone properties byte, as a .lzma file starts
    train, test = load_emnist_sqlite(packed, only_digits=True)
    cache = tmp_path / "emnist_all.sqlite"
    with train, test, EmnistSqlite(plain, "digits_only_train") as reference:
        assert train.path == cache and cache.read_bytes() == plain.read_bytes()
        _assert_same(reference, train)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left behind

    def no_decompression(*args: object, **kwargs: object) -> None:
        raise AssertionError("decompressed again")

    monkeypatch.setattr(download_module.lzma, "LZMADecompressor", no_decompression)
    with EmnistSqlite(packed, "digits_only_test") as again:
        assert again.path == cache
    packed.unlink()
    with EmnistSqlite(packed, "digits_only_test") as without_source:  # the cache alone is enough
        assert without_source.path == cache


def test_lzma_cache_dir_and_xz_container(tmp_path: Path, both_layouts: tuple[Path, Path]) -> None:
    _, sqlite_path = both_layouts
    xz = tmp_path / "emnist_all.sqlite.lzma"
    xz.write_bytes(lzma.compress(sqlite_path.read_bytes(), format=lzma.FORMAT_XZ))
    with EmnistSqlite(xz, "digits_only_train", cache_dir=tmp_path / "cache") as ds:
        assert ds.path == tmp_path / "cache" / "emnist_all.sqlite"
        assert len(ds.client_ids) > 0
    assert not (tmp_path / "emnist_all.sqlite").exists()


def test_stale_cache_is_replaced(tmp_path: Path, logical: dict) -> None:
    cache = tmp_path / "emnist_all.sqlite"
    cache.write_bytes(b"stale")
    os.utime(cache, (1, 1))
    packed = write_emnist_sqlite(tmp_path / "emnist_all.sqlite.lzma", {"digits_only_test": logical["test"]})
    assert ensure_decompressed(packed) == cache and cache.read_bytes()[:6] == b"SQLite"


def test_tff_layout_without_index_warns_and_its_lzma_copy_is_indexed(tmp_path: Path, logical: dict) -> None:
    """TFF's writer creates no index: such a file reads the same, in the same order, with a warning on the cost;
    the copy fedpub decompresses from a .sqlite.lzma is indexed before it is put in place."""
    splits = {"digits_only_train": logical["train"]}
    plain = write_emnist_sqlite(tmp_path / "plain" / "emnist_all.sqlite", splits, index=False)
    packed = write_emnist_sqlite(tmp_path / "emnist_all.sqlite.lzma", splits, index=False)
    with pytest.warns(UserWarning, match="emnist_all.sqlite: table 'examples' has no index on client_id"):
        unindexed = EmnistSqlite(plain, "digits_only_train")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        indexed = EmnistSqlite(packed, "digits_only_train")
    with unindexed, indexed:
        assert indexed.path == tmp_path / "emnist_all.sqlite"
        _assert_same(unindexed, indexed)
    with sqlite3.connect(indexed.path) as connection:
        assert has_client_index(connection)
    connection.close()


def test_a_folder_holding_the_database(tmp_path: Path, logical: dict, both_layouts: tuple[Path, Path]) -> None:
    """``data.path`` may be the folder: its emnist_all.sqlite, or its emnist_all.sqlite.lzma decompressed beside it
    (after which the folder holds both, the .sqlite being the newer)."""
    _, sqlite_path = both_layouts
    with EmnistSqlite(sqlite_path.parent, "digits_only_train") as by_folder, EmnistSqlite(
        sqlite_path, "digits_only_train"
    ) as by_file:
        assert by_folder.path == sqlite_path
        _assert_same(by_file, by_folder)
    splits = {"digits_only_train": logical["train"], "digits_only_test": logical["test"]}
    packed = write_emnist_sqlite(tmp_path / "emnist_all.sqlite.lzma", splits)
    train, test = load_emnist_sqlite(tmp_path, only_digits=True)
    with train, test, EmnistSqlite(sqlite_path, "digits_only_test") as reference:
        assert train.path == test.path == tmp_path / "emnist_all.sqlite"
        _assert_same(reference, test)
    os.utime(packed, (packed.stat().st_atime, packed.stat().st_mtime - 10))  # the copy is newer: it is the cache
    with EmnistSqlite(tmp_path, "digits_only_train") as again:
        assert again.path == tmp_path / "emnist_all.sqlite"


def test_the_config_may_name_the_folder(both_layouts: tuple[Path, Path]) -> None:
    """``data.path`` of an ``emnist_sqlite`` config: the folder holding emnist_all.sqlite, as its description says."""
    _, sqlite_path = both_layouts
    config = parse_config({"data": {"source": "emnist_sqlite", "path": str(sqlite_path.parent)}})
    data = load_data(config)
    with EmnistSqlite(sqlite_path, "digits_only_test") as reference:
        _assert_same(reference, data.test)


def test_a_folder_without_one_database_names_the_folder_and_the_names(tmp_path: Path, db: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError) as err:
        EmnistSqlite(empty, "all_train")
    assert str(err.value).startswith(f"{empty} is a folder holding neither emnist_all.sqlite nor ")
    assert "emnist_all.sqlite.lzma (the names looked for): download https://" in str(err.value)
    folder = tmp_path / "both"
    folder.mkdir()
    plain = folder / "emnist_all.sqlite"
    plain.write_bytes(db.read_bytes())
    os.utime(plain, (1, 1))  # older than the .lzma: not its decompressed copy
    (folder / "emnist_all.sqlite.lzma").write_bytes(lzma.compress(db.read_bytes(), format=lzma.FORMAT_ALONE))
    with pytest.raises(DatasetError) as err:
        load_emnist_sqlite(folder, only_digits=False)
    assert str(err.value) == (
        f"{folder} holds both emnist_all.sqlite and emnist_all.sqlite.lzma, and emnist_all.sqlite is older, so it "
        "is not the decompressed copy of emnist_all.sqlite.lzma: delete emnist_all.sqlite to read "
        "emnist_all.sqlite.lzma, or emnist_all.sqlite.lzma to read emnist_all.sqlite"
    )
    assert plain.stat().st_mtime == 1  # neither file was touched


# ---------------------------------------------------------------------------------------------------------------
# Named errors: each names the file and what is wrong.


@pytest.fixture
def db(tmp_path: Path, logical: dict) -> Path:
    return write_emnist_sqlite(tmp_path / "emnist_all.sqlite", {"digits_only_train": logical["train"]})


def _first_client(path: Path) -> str:
    with EmnistSqlite(path, "digits_only_train") as ds:
        return ds.client_ids[0]


def _set_first_row(path: Path, blob: object) -> str:
    client = _first_client(path)
    with sqlite3.connect(path) as connection:
        connection.execute(
            "UPDATE examples SET serialized_example_proto = ? WHERE rowid = "
            "(SELECT MIN(rowid) FROM examples WHERE client_id = ?)",
            (blob, client),
        )
    connection.close()
    return client


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"emnist_all\.sqlite does not exist.*fedpub data download"):
        EmnistSqlite(tmp_path / "emnist_all.sqlite", "all_train")
    with pytest.raises(DatasetError, match=r"emnist_all\.sqlite\.lzma does not exist"):
        EmnistSqlite(tmp_path / "emnist_all.sqlite.lzma", "all_train")


def test_not_a_sqlite_database(tmp_path: Path) -> None:
    for content in (b"", b"PK\x03\x04 this is a zip file, not a database"):
        path = tmp_path / "emnist_all.sqlite"
        path.write_bytes(content)
        with pytest.raises(DatasetError, match=f"{path} is not a SQLite database"):
            EmnistSqlite(path, "all_train")


def test_bad_lzma(tmp_path: Path, db: Path) -> None:
    garbage = tmp_path / "garbage.sqlite.lzma"
    garbage.write_bytes(b"not compressed at all" * 10)
    with pytest.raises(DatasetError, match=r"garbage\.sqlite\.lzma is not a valid lzma/xz file"):
        EmnistSqlite(garbage, "all_train")
    truncated = tmp_path / "truncated.sqlite.lzma"
    truncated.write_bytes(lzma.compress(db.read_bytes(), format=lzma.FORMAT_ALONE)[:2000])
    with pytest.raises(DatasetError, match=r"truncated\.sqlite\.lzma ends before its lzma stream"):
        EmnistSqlite(truncated, "all_train")
    assert not (tmp_path / "truncated.sqlite").exists() and not (tmp_path / "garbage.sqlite").exists()


def test_missing_table_and_column(tmp_path: Path) -> None:
    path = tmp_path / "no_meta.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE examples (split_name TEXT, client_id TEXT, serialized_example_proto BLOB)")
    connection.close()
    with pytest.raises(DatasetError, match=r"no_meta\.sqlite has no 'client_metadata' table \(tables: examples\)"):
        EmnistSqlite(path, "all_train")
    path = tmp_path / "no_column.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE examples (split_name TEXT, client_id TEXT, proto BLOB)")
        connection.execute("CREATE TABLE client_metadata (client_id TEXT, split_name TEXT, num_examples INTEGER)")
    connection.close()
    with pytest.raises(DatasetError, match=r"no_column\.sqlite: table 'examples' lacks column\(s\) serialized_example"):
        EmnistSqlite(path, "all_train")


def test_unknown_split_lists_allowed(db: Path) -> None:
    with pytest.raises(
        DatasetError, match=r"unknown EMNIST split 'train'.*all_train, all_test, digits_only_train, digits_only_test"
    ):
        EmnistSqlite(db, "train")


def test_split_absent_from_file(db: Path) -> None:
    with pytest.raises(DatasetError, match=r"no clients in split 'all_test' \(splits present: digits_only_train\)"):
        EmnistSqlite(db, "all_test")


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x0a\xff\x01", r"example 0 is not a valid tf.train.Example"),
        ("text", r"example 0 is a str, not a serialised tf.train.Example"),
        (encode_example({"label": [3]}), r"example 0 is not an EMNIST tf.train.Example: it needs 'pixels'"),
        (encode_example({"label": [3], "pixels": [0.5] * 783}), r"example 0 has 783 'pixels' values, expected 784"),
        (encode_example({"label": [3], "pixels": [7] * 784}), r"expected 784 floats"),
        (encode_example({"label": [3, 4], "pixels": [0.5] * 784}), r"has 'label' \[3, 4\], expected one int64"),
        (encode_example({"label": [10], "pixels": [0.5] * 784}), r"labels in \[.*10\], outside \[0, 9\]"),
        (encode_example({"label": [1], "pixels": [1.5] * 784}), r"pixel values outside \[0, 1\]"),
    ],
)
def test_bad_rows_are_named(db: Path, blob: object, message: str) -> None:
    client = _set_first_row(db, blob)
    with EmnistSqlite(db, "digits_only_train") as ds:
        with pytest.raises(DatasetError, match=rf"{db}: split 'digits_only_train', client '{client}'.*{message}"):
            ds.client_data(client)


def test_count_disagreeing_with_metadata(db: Path) -> None:
    client = _first_client(db)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE client_metadata SET num_examples = num_examples + 1 WHERE client_id = ?", (client,))
    connection.close()
    with EmnistSqlite(db, "digits_only_train") as ds:
        with pytest.raises(DatasetError, match=r"has \d+ examples but client_metadata says \d+"):
            ds.client_data(client)


def test_conflicting_metadata(db: Path) -> None:
    client = _first_client(db)
    with sqlite3.connect(db) as connection:
        connection.execute("INSERT INTO client_metadata VALUES (?, 'digits_only_train', 999)", (client,))
    connection.close()
    with pytest.raises(DatasetError, match=rf"client '{client}' .* conflicting counts"):
        EmnistSqlite(db, "digits_only_train")


def test_writers_reject_bad_input(tmp_path: Path) -> None:
    good = {"f0000_00": (np.ones((2, 28, 28), np.float32), np.array([1, 2]))}
    with pytest.raises(ValueError, match="unknown EMNIST split"):
        write_emnist_sqlite(tmp_path / "x.sqlite", {"train": good})
    with pytest.raises(ValueError, match=r"pixels of shape \(2, 28\)"):
        write_emnist_h5(tmp_path / "x.h5", {"f0000_00": (np.ones((2, 28)), np.array([1, 2]))})
    with pytest.raises(ValueError, match="expected integers of shape"):
        write_emnist_h5(tmp_path / "x.h5", {"f0000_00": (np.ones((2, 28, 28)), np.array([1.0, 2.0]))})
    assert not list(tmp_path.iterdir())


def test_h5_writer_matches_tff_layout(tmp_path: Path) -> None:
    pixels, labels = np.full((3, 28, 28), 0.25, np.float32), np.array([0, 5, 9], dtype=np.int64)
    path = write_emnist_h5(tmp_path / "fed_emnist_digitsonly_train.h5", {"f0003_07": (pixels, labels)})
    with h5py.File(path, "r") as f:
        assert f["examples/f0003_07/label"].dtype == np.int32 and f["examples/f0003_07/pixels"].dtype == np.float32
    with EmnistH5(path) as ds:
        np.testing.assert_array_equal(ds.client_data("f0003_07").y.numpy(), labels)
