"""Lazy reader for TFF's federated EMNIST SQLite database (``emnist_all.sqlite``, published as ``.sqlite.lzma``).

TFF's ``SqlClientData`` (google-parfait/tensorflow-federated, ``tensorflow_federated/python/simulation/datasets/
sql_client_data.py`` and ``emnist.py``, since commit 7bb20162f) reads two tables:
``examples(split_name, client_id, serialized_example_proto)`` and ``client_metadata(client_id, split_name,
num_examples)``. Client ids are ``SELECT DISTINCT client_id FROM client_metadata WHERE split_name = ?`` sorted in
Python; a client's rows are selected without ORDER BY (so in the order of the table scan: rowid order; fedpub says
ORDER BY rowid, the same order with or without an index); each row is a serialised ``tf.train.Example`` with
``pixels`` (784 floats, row-major 28x28) and ``label`` (one int64), parsed as ``emnist._add_proto_parsing`` does. One
file holds the splits ``all_train``, ``all_test``, ``digits_only_train`` and ``digits_only_test``. See
``shared/reference/datasets.md`` §1.2-1.3.

TFF's writer (``sql_client_data_utils.save_to_sql_client_data``) creates no index, only TFF's tests do, so the
published databases have none and every client read scans the whole ``examples`` table (measured with
``simulations/benchmarks/sqlite_index.py``: about 2 GB/s with the file in memory, so seconds per client for
EMNIST's 3.5 GB and about half a minute for StackOverflow). The copy fedpub decompresses from a ``.sqlite.lzma`` is
indexed before it is put in place (:func:`add_client_index`, minutes and about a tenth more disk for
StackOverflow); a ``.sqlite`` opened as it is, without the index, is read correctly with a warning.

Arrays come back exactly as from :class:`~fedpub.data.emnist.EmnistH5`: x float32 ``(N, 1, 28, 28)`` in [0, 1]
(background 1.0, no inversion), y int64 ``(N,)``.
"""

from __future__ import annotations

import os
import sqlite3
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from fedpub.data.base import ClientData, DatasetError
from fedpub.data.download import SQLITE_HEADER, ensure_decompressed
from fedpub.data.emnist import IMAGE_SHAPE, checked_client_data
from fedpub.data.tf_example import ExampleDecodeError, FeatureValue, decode_example

SPLITS: dict[str, int] = {"all_train": 62, "all_test": 62, "digits_only_train": 10, "digits_only_test": 10}
"""EMNIST split name -> number of classes."""
TFF_TABLES: dict[str, tuple[str, ...]] = {
    "examples": ("split_name", "client_id", "serialized_example_proto"),
    "client_metadata": ("client_id", "split_name", "num_examples"),
}
"""The tables and columns TFF's SqlClientData requires (extra ones are allowed)."""
NUM_PIXELS = IMAGE_SHAPE[0] * IMAGE_SHAPE[1]
SQLITE_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)
"""What sqlite3 raises on a corrupt database (a damaged page, or text that is no longer UTF-8)."""
SQLITE_FILE = "emnist_all.sqlite"
SQLITE_HINT = (
    "download https://storage.googleapis.com/tff-datasets-public/emnist_all.sqlite.lzma "
    "(`fedpub data download emnist_all.sqlite.lzma`)"
)


def connect_tff_sqlite(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open a TFF SqlClientData database read-only, after checking it has TFF's tables and columns."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"SQLite file {path} does not exist")
    with open(path, "rb") as f:
        header = f.read(len(SQLITE_HEADER))
    if header != SQLITE_HEADER:
        raise DatasetError(f"{path} is not a SQLite database (its first bytes are {header!r})")
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table, required in TFF_TABLES.items():
            if table not in tables:
                raise DatasetError(
                    f"{path} has no '{table}' table (tables: {', '.join(sorted(tables)) or 'none'}): "
                    "not a TFF SqlClientData database"
                )
            columns = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
            missing = [c for c in required if c not in columns]
            if missing:
                raise DatasetError(
                    f"{path}: table '{table}' lacks column(s) {', '.join(missing)} "
                    f"(it has {', '.join(sorted(columns))}; TFF needs {', '.join(required)})"
                )
    except SQLITE_ERRORS as exc:
        connection.close()
        raise DatasetError(f"{path} is not a readable SQLite database (corrupt?): {exc}") from None
    except BaseException:
        connection.close()
        raise
    return connection


CLIENT_INDEX = "CREATE INDEX idx_client_id_split ON examples (split_name, client_id)"
"""The index on the client id that TFF's tests give ``examples`` (``sql_client_data_test.py``). TFF's writer,
``sql_client_data_utils.save_to_sql_client_data``, creates the two tables and no index, and TFF's reader selects a
client's rows with ``WHERE client_id = ... and split_name = ...``: without the index every client read scans the
whole table."""
SCAN_BYTES_PER_SECOND = 2e9
"""How fast SQLite scans ``examples`` with the file in memory: about 2 GB/s, measured by
``simulations/benchmarks/sqlite_index.py``; from disk, slower."""


def has_client_index(connection: sqlite3.Connection) -> bool:
    """Whether ``examples`` has an index that finds one client's rows without a full scan."""
    for row in connection.execute("PRAGMA index_list(examples)"):
        columns = [info[2] for info in connection.execute(f"PRAGMA index_info({row[1]!r})")]
        if columns[:1] == ["client_id"] or set(columns[:2]) == {"split_name", "client_id"}:
            return True
    return False


def add_client_index(path: str | os.PathLike[str]) -> None:
    """Index ``examples`` of a TFF SqlClientData file on (split_name, client_id) (:data:`CLIENT_INDEX`) unless it
    has such an index. The file grows by about a tenth for StackOverflow's short rows (less for EMNIST's images);
    see :data:`CLIENT_INDEX` for why TFF's databases need it."""
    probe = connect_tff_sqlite(path)
    try:
        indexed = has_client_index(probe)
    finally:
        probe.close()
    if indexed:
        return
    with sqlite3.connect(path) as connection:
        connection.execute(CLIENT_INDEX)
    connection.close()


def _index_copy(copy: Path) -> None:
    """Index a database fedpub has just decompressed, before it is renamed into place. One that is not a
    readable TFF database is left as it is: opening it, the reader names the file and what is wrong."""
    try:
        add_client_index(copy)
    except (DatasetError, *SQLITE_ERRORS):
        pass


def find_sqlite(folder: Path, name: str, hint: str) -> Path:
    """The database ``name`` (e.g. ``emnist_all.sqlite``) in ``folder``: ``name``, or ``name.lzma`` when only that
    is there. Both there: ``name`` when it is at least as new as ``name.lzma`` (the decompressed copy
    :func:`~fedpub.data.download.ensure_decompressed` keeps beside it); an older ``name`` is a stale copy or
    another database, and is refused. Neither there, or that refusal: a DatasetError naming the folder and both
    names (``hint`` says where to get the file)."""
    plain, packed = folder / name, folder / f"{name}.lzma"
    if plain.is_file() and packed.is_file() and plain.stat().st_mtime < packed.stat().st_mtime:
        raise DatasetError(
            f"{folder} holds both {name} and {name}.lzma, and {name} is older, so it is not the decompressed copy "
            f"of {name}.lzma: delete {name} to read {name}.lzma, or {name}.lzma to read {name}"
        )
    for candidate in (plain, packed):
        if candidate.is_file():
            return candidate
    raise DatasetError(f"{folder} is a folder holding neither {name} nor {name}.lzma (the names looked for): {hint}")


def resolve_sqlite_path(
    given: Path, cache_dir: str | os.PathLike[str] | None, *, dataset: str, name: str, hint: str
) -> Path:
    """The SQLite file to read: ``given`` itself; its decompressed copy when it is a ``.lzma`` (indexed on the
    client id before it is put in place: :func:`add_client_index`); for a folder, the database ``name`` in it
    (:func:`find_sqlite`). A missing file raises DatasetError naming the ``dataset`` and the ``hint``."""
    if given.is_dir():
        given = find_sqlite(given, name, hint)
    if given.name.endswith(".lzma"):
        return ensure_decompressed(given, cache_dir, prepare=_index_copy)
    if not given.is_file():
        raise DatasetError(f"{dataset} SQLite file {given} does not exist: {hint}")
    return given


def decode_row(blob: object, where: str) -> dict[str, FeatureValue]:
    """The features of one ``serialized_example_proto`` cell; raises :class:`DatasetError` naming ``where`` when the
    cell is not a serialised ``tf.train.Example``."""
    if not isinstance(blob, bytes):
        raise DatasetError(f"{where} is a {type(blob).__name__}, not a serialised tf.train.Example")
    try:
        return decode_example(blob)
    except ExampleDecodeError as exc:
        raise DatasetError(f"{where} is not a valid tf.train.Example: {exc}") from None


class SqliteSplitConnection:
    """A read-only connection to one split of a TFF SqlClientData file, opened by each process on first use
    (so a forked or unpickled reader opens its own) and closed by :meth:`close`; a database error while
    reading becomes a :class:`DatasetError` naming the file and the split."""

    def __init__(self, path: Path, split: str) -> None:
        self.path, self.split = path, split
        self._connection: sqlite3.Connection | None = None
        self._pid = -1

    def handle(self) -> sqlite3.Connection:
        if self._connection is None or self._pid != os.getpid():
            self._connection = connect_tff_sqlite(self.path)
            self._pid = os.getpid()
        return self._connection

    def query(self, sql: str, parameters: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            return self.handle().execute(sql, tuple(parameters)).fetchall()
        except SQLITE_ERRORS as exc:
            raise DatasetError(f"{self.path}: cannot read split {self.split!r} (corrupt database?): {exc}") from None

    def where(self, client_id: str) -> str:
        """How an error names one client: the file, the split and the client."""
        return f"{self.path}: split {self.split!r}, client {client_id!r}"

    def warn_without_client_index(self) -> None:
        """Warn (UserWarning) when ``examples`` has no index on the client id, saying what reading costs then."""
        try:
            indexed = has_client_index(self.handle())
        except SQLITE_ERRORS as exc:
            raise DatasetError(f"{self.path}: cannot read its indexes (corrupt database?): {exc}") from None
        if not indexed:
            size = self.path.stat().st_size
            warnings.warn(
                f"{self.path}: table 'examples' has no index on client_id (TFF's writer creates none), so every "
                f"client read scans the whole table, {size / 2**20:,.0f} MiB: about "
                f"{size / SCAN_BYTES_PER_SECOND:,.1f} s per client with the file in memory, more from disk, against "
                "milliseconds with the index. fedpub.data.emnist_sqlite.add_client_index adds one to the file "
                "(fedpub adds it to the copy it decompresses from a .sqlite.lzma)",
                stacklevel=3,
            )

    def close(self) -> None:
        if self._connection is not None and self._pid == os.getpid():
            self._connection.close()
        self._connection = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "split": self.split}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["split"])  # type: ignore[misc]


class EmnistSqlite:
    """One split of TFF's ``emnist_all.sqlite`` as a lazy :class:`FederatedDataset`.

    ``path`` may be the ``.sqlite`` file, the published ``.sqlite.lzma``, which is decompressed once (streamed)
    to ``cache_dir`` (default: beside it) and reused afterwards, or a folder holding ``emnist_all.sqlite`` or
    ``emnist_all.sqlite.lzma`` (:func:`find_sqlite`). Client ids and example counts come from
    ``client_metadata`` when the object is made; ``client_data`` reads one client's rows. The connection stays
    open until ``close()`` (or the end of a ``with`` block); pickling keeps the path, split and metadata, and a
    process that did not open the connection (unpickled or forked) opens its own on first use.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        split: str,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        given = Path(path)
        if split not in SPLITS:
            raise DatasetError(f"unknown EMNIST split {split!r} for {given}: allowed splits are {', '.join(SPLITS)}")
        self.path = resolve_sqlite_path(given, cache_dir, dataset="EMNIST", name=SQLITE_FILE, hint=SQLITE_HINT)
        self.split = split
        self.num_classes = SPLITS[split]
        self._db = SqliteSplitConnection(self.path, split)
        self._counts = self._read_metadata()
        self.client_ids: list[str] = sorted(self._counts)
        self._db.warn_without_client_index()

    def _read_metadata(self) -> dict[str, int]:
        rows = self._db.query("SELECT client_id, num_examples FROM client_metadata WHERE split_name = ?", (self.split,))
        if not rows:
            present = [r[0] for r in self._db.query("SELECT DISTINCT split_name FROM client_metadata", ())]
            raise DatasetError(
                f"{self.path} has no clients in split {self.split!r} "
                f"(splits present: {', '.join(sorted(map(str, present))) or 'none'})"
            )
        counts: dict[str, int] = {}
        for client_id, num in rows:
            if not isinstance(client_id, str) or not isinstance(num, int) or num < 0:
                raise DatasetError(
                    f"{self.path}: client_metadata row ({client_id!r}, {num!r}) of split {self.split!r} "
                    "is not (text client id, non-negative integer count)"
                )
            if counts.setdefault(client_id, num) != num:
                raise DatasetError(
                    f"{self.path}: client {client_id!r} of split {self.split!r} has conflicting counts "
                    f"{counts[client_id]} and {num} in client_metadata"
                )
        return counts

    def num_examples(self, client_id: str) -> int:
        """Number of examples of ``client_id``, from ``client_metadata`` (no example is read)."""
        try:
            return self._counts[client_id]
        except KeyError:
            raise KeyError(f"client {client_id!r} is not in split {self.split!r} of {self.path}") from None

    def _parse(self, blob: object, where: str) -> tuple[np.ndarray, int]:
        features = decode_row(blob, where)
        pixels, label = features.get("pixels"), features.get("label")
        if pixels is None or label is None:
            raise DatasetError(
                f"{where} is not an EMNIST tf.train.Example: it needs 'pixels' and 'label' features, "
                f"it has {sorted(features) or 'none'}"
            )
        if len(pixels) != NUM_PIXELS or not isinstance(pixels[0], float):
            raise DatasetError(f"{where} has {len(pixels)} 'pixels' values, expected 784 floats (28x28)")
        if len(label) != 1 or not isinstance(label[0], int):
            raise DatasetError(f"{where} has 'label' {label[:4]!r}, expected one int64")
        return np.asarray(pixels, dtype=np.float32).reshape(IMAGE_SHAPE), label[0]

    def client_data(self, client_id: str) -> ClientData:
        """Read one client: x float32 ``(N, 1, 28, 28)`` in [0, 1] (background 1.0), y int64 ``(N,)``."""
        expected = self.num_examples(client_id)
        rows = self._db.query(
            "SELECT serialized_example_proto FROM examples WHERE client_id = ? AND split_name = ? ORDER BY rowid",
            (client_id, self.split),
        )
        if len(rows) != expected:
            where = self._db.where(client_id)
            raise DatasetError(f"{where} has {len(rows)} examples but client_metadata says {expected}")
        return self.decode_rows(client_id, [blob for blob, in rows])

    def decode_rows(self, client_id: str, blobs: Sequence[object]) -> ClientData:
        """``client_id``'s examples from its ``serialized_example_proto`` cells, in order, checked as
        :meth:`client_data` checks them (``fedpub data verify`` decodes a whole file this way, in one scan)."""
        where = self._db.where(client_id)
        x = np.empty((len(blobs), *IMAGE_SHAPE), dtype=np.float32)
        y = np.empty(len(blobs), dtype=np.int64)
        for i, blob in enumerate(blobs):
            x[i], y[i] = self._parse(blob, f"{where}, example {i}")
        return checked_client_data(x, y, self.num_classes, where)

    def close(self) -> None:
        """Close the connection (a later read reopens it)."""
        self._db.close()

    def __enter__(self) -> EmnistSqlite:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EmnistSqlite({str(self.path)!r}, {self.split!r}, clients={len(self.client_ids)})"


def load_emnist_sqlite(
    path: str | os.PathLike[str], only_digits: bool, *, cache_dir: str | os.PathLike[str] | None = None
) -> tuple[EmnistSqlite, EmnistSqlite]:
    """Open the train and test splits (``digits_only_*`` or ``all_*``) of ``emnist_all.sqlite[.lzma]``: ``path``
    is that file or a folder holding it."""
    prefix = "digits_only" if only_digits else "all"
    train = EmnistSqlite(path, f"{prefix}_train", cache_dir=cache_dir)
    try:
        test = EmnistSqlite(path, f"{prefix}_test", cache_dir=cache_dir)
    except BaseException:
        train.close()
        raise
    return train, test
