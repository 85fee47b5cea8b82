"""TFF's ``SqlClientData`` databases, whatever dataset they hold: opened read-only after checking the two tables
and the columns TFF's reader requires (google-parfait/tensorflow-federated, ``tensorflow_federated/python/
simulation/datasets/sql_client_data.py``; ``shared/reference/datasets.md`` §1.2).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from fedpub.data.base import DatasetError
from fedpub.data.download import SQLITE_HEADER

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
