"""Write federated EMNIST data in TFF's two layouts: HDF5 files and the SQLite database (optionally ``.lzma``).

The same logical data, ``{client_id: (pixels (N, 28, 28) float32, labels (N,))}`` per split, is written as TFF's
``HDF5ClientData`` files (``/examples/<client_id>/{label int32, pixels float32}``, datasets.md §1.1) or as the tables
of TFF's ``SqlClientData`` with the DDL of TFF's own writer ``sql_client_data_utils.save_to_sql_client_data``
(datasets.md §1.2; rows are ``tf.train.Example``s with ``pixels`` and ``label``, §1.3), plus, unless
``index=False``, the two indexes TFF's tests add (``sql_client_data_test.py``; the writer adds none). Read back through
:class:`~fedpub.data.emnist.EmnistH5` and :class:`~fedpub.data.emnist_sqlite.EmnistSqlite`, both give identical
client ids, pixels and labels. Used by the tests and to convert data (e.g. the synthetic quick-start set) between
layouts. Every file is written under a temporary name and renamed into place when complete.
"""

from __future__ import annotations

import lzma
import os
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path

import h5py
import numpy as np

from fedpub.atomic import atomic_path
from fedpub.data.base import FederatedDataset
from fedpub.data.download import CHUNK
from fedpub.data.emnist import IMAGE_SHAPE
from fedpub.data.emnist_sqlite import SPLITS
from fedpub.data.tff_sqlite import CLIENT_INDEX
from fedpub.data.tf_example import encode_example

EmnistClients = Mapping[str, tuple[np.ndarray, np.ndarray]]
"""``{client_id: (pixels float32 (N, 28, 28), labels int (N,))}``; clients are written in mapping order."""

SQLITE_DDL = (
    "CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, "
    "serialized_example_proto BLOB NOT NULL)",
    "CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT NULL, num_examples INTEGER NOT NULL)",
)
"""The tables of TFF's writer, ``save_to_sql_client_data`` (which creates no index)."""
SQLITE_INDEXES = (CLIENT_INDEX, "CREATE INDEX idx_metadata_client_id ON client_metadata (client_id)")
"""The indexes of TFF's tests' databases (``sql_client_data_test.py``)."""


def _checked(clients: EmnistClients) -> list[tuple[str, np.ndarray, np.ndarray]]:
    out = []
    for client_id, (pixels, labels) in clients.items():
        pixels, labels = np.asarray(pixels), np.asarray(labels)
        if not isinstance(client_id, str) or not client_id:
            raise ValueError(f"client ids must be non-empty strings, got {client_id!r}")
        if pixels.ndim != 3 or pixels.shape[1:] != IMAGE_SHAPE:
            raise ValueError(f"client {client_id!r}: pixels of shape {pixels.shape}, expected (N, 28, 28)")
        if labels.shape != (pixels.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(
                f"client {client_id!r}: labels of shape {labels.shape} and dtype {labels.dtype}, "
                f"expected integers of shape ({pixels.shape[0]},)"
            )
        out.append((client_id, pixels.astype(np.float32, copy=False), labels))
    return out


def write_emnist_h5(path: str | os.PathLike[str], clients: EmnistClients) -> Path:
    """Write one split (train or test) as a TFF federated EMNIST HDF5 file: labels int32, pixels float32."""
    checked = _checked(clients)
    path = Path(path)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        examples = f.create_group("examples")
        for client_id, pixels, labels in checked:
            group = examples.create_group(client_id)
            group.create_dataset("label", data=labels.astype(np.int32), track_times=False)
            group.create_dataset("pixels", data=pixels, track_times=False)
    return path


def _write_sqlite(path: Path, splits: Mapping[str, EmnistClients], index: bool) -> None:
    with sqlite3.connect(path) as connection:
        for statement in SQLITE_DDL + (SQLITE_INDEXES if index else ()):
            connection.execute(statement)
        for split, clients in splits.items():
            for client_id, pixels, labels in _checked(clients):
                connection.executemany(
                    "INSERT INTO examples (split_name, client_id, serialized_example_proto) VALUES (?, ?, ?)",
                    (
                        (split, client_id, encode_example({"label": [int(y)], "pixels": x.ravel().tolist()}))
                        for x, y in zip(pixels, labels)
                    ),
                )
                connection.execute(
                    "INSERT INTO client_metadata (client_id, split_name, num_examples) VALUES (?, ?, ?)",
                    (client_id, split, len(labels)),
                )
    connection.close()


def write_emnist_sqlite(
    path: str | os.PathLike[str], splits: Mapping[str, EmnistClients], *, index: bool = True
) -> Path:
    """Write ``{split_name: clients}`` as TFF's ``emnist_all.sqlite``; a name ending in ``.lzma`` is compressed.

    Split names must be TFF's (``all_train``, ``all_test``, ``digits_only_train``, ``digits_only_test``). The
    compressed form is the legacy ``.lzma`` (LZMA_Alone) container, which ``lzma.LZMADecompressor`` reads.
    ``index=False`` leaves out the indexes of TFF's tests: the tables of TFF's writer alone, as published.
    """
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise ValueError(f"unknown EMNIST split(s) {unknown}; allowed: {', '.join(SPLITS)}")
    path = Path(path)
    if not path.name.endswith(".lzma"):
        with atomic_path(path) as tmp:
            _write_sqlite(tmp, splits, index)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        plain = Path(scratch) / path.name.removesuffix(".lzma")
        _write_sqlite(plain, splits, index)
        compressor = lzma.LZMACompressor(format=lzma.FORMAT_ALONE)
        with open(plain, "rb") as src, atomic_path(path) as tmp, open(tmp, "wb") as dst:
            while chunk := src.read(CHUNK):
                dst.write(compressor.compress(chunk))
            dst.write(compressor.flush())
    return path


def read_emnist_clients(dataset: FederatedDataset) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every client of an EMNIST dataset as ``{client_id: (pixels (N, 28, 28), labels (N,))}`` (for conversion)."""
    out = {}
    for client_id in dataset.client_ids:
        data = dataset.client_data(client_id)
        out[client_id] = (data.x.squeeze(1).numpy(), data.y.numpy())
    return out
