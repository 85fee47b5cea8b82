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

The database, its index on the client id and the row decoding are TFF's ``SqlClientData``'s, whatever it holds
(:mod:`fedpub.data.tff_sqlite`).

Arrays come back exactly as from :class:`~fedpub.data.emnist.EmnistH5`: x float32 ``(N, 1, 28, 28)`` in [0, 1]
(background 1.0, no inversion), y int64 ``(N,)``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from fedpub.data.base import ClientData, DatasetError
from fedpub.data.emnist import IMAGE_SHAPE, checked_client_data
from fedpub.data.tff_sqlite import SqliteSplitConnection, decode_row, resolve_sqlite_path

SPLITS: dict[str, int] = {"all_train": 62, "all_test": 62, "digits_only_train": 10, "digits_only_test": 10}
"""EMNIST split name -> number of classes."""
NUM_PIXELS = IMAGE_SHAPE[0] * IMAGE_SHAPE[1]
SQLITE_FILE = "emnist_all.sqlite"
SQLITE_HINT = (
    "download https://storage.googleapis.com/tff-datasets-public/emnist_all.sqlite.lzma "
    "(`fedpub data download emnist_all.sqlite.lzma`)"
)


class EmnistSqlite:
    """One split of TFF's ``emnist_all.sqlite`` as a lazy :class:`FederatedDataset`.

    ``path`` may be the ``.sqlite`` file, the published ``.sqlite.lzma``, which is decompressed once (streamed)
    to ``cache_dir`` (default: beside it) and reused afterwards, or a folder holding ``emnist_all.sqlite`` or
    ``emnist_all.sqlite.lzma`` (:func:`~fedpub.data.tff_sqlite.find_sqlite`). Client ids and example counts come from
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
