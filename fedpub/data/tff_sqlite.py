"""TFF's ``SqlClientData`` databases, whatever dataset they hold (google-parfait/tensorflow-federated,
``tensorflow_federated/python/simulation/datasets/sql_client_data.py``; ``shared/reference/datasets.md`` §1.2-1.3):
two tables, ``examples(split_name, client_id, serialized_example_proto)`` and ``client_metadata(client_id,
split_name, num_examples)``, opened read-only after checking them; a split's connection per process; a database in a
folder, or its ``.sqlite.lzma``; one row decoded as a ``tf.train.Example``.

TFF's writer (``sql_client_data_utils.save_to_sql_client_data``) creates no index, only TFF's tests do, so the
published databases have none and every client read scans the whole ``examples`` table (measured with
``simulations/benchmarks/sqlite_index.py``: about 2 GB/s with the file in memory, so seconds per client for a
3.5 GB database and about half a minute for the largest). The copy fedpub decompresses from a ``.sqlite.lzma`` is
indexed before it is put in place (:func:`add_client_index`, minutes and about a tenth more disk for the largest);
a ``.sqlite`` opened as it is, without the index, is read correctly with a warning.
"""

from __future__ import annotations

import os
import sqlite3
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedpub.data.base import DatasetError
from fedpub.data.download import SQLITE_HEADER, ensure_decompressed
from fedpub.data.tf_example import ExampleDecodeError, FeatureValue, decode_example

TFF_TABLES: dict[str, tuple[str, ...]] = {
    "examples": ("split_name", "client_id", "serialized_example_proto"),
    "client_metadata": ("client_id", "split_name", "num_examples"),
}
"""The tables and columns TFF's SqlClientData requires (extra ones are allowed)."""
SQLITE_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)
"""What sqlite3 raises on a corrupt database (a damaged page, or text that is no longer UTF-8)."""


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
    has such an index. The file grows by about a tenth for short text rows (less for images);
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
    """The database ``name`` (a dataset's file name, without ``.lzma``) in ``folder``: ``name``, or ``name.lzma`` when only that
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
                "milliseconds with the index. fedpub.data.tff_sqlite.add_client_index adds one to the file "
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
