"""What ``fedpub data info|verify`` says about federated EMNIST's files: a TFF HDF5 file (clients, examples, the
classes seen; verify reads every client with the reader's range checks) and its SQLite database's splits (the
class count of each, the train/test pair a run reads, and the reader that decodes every row for verify).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from fedpub.data.base import h5_errors
from fedpub.data.emnist import EmnistH5
from fedpub.data.emnist_sqlite import SPLITS, EmnistSqlite
from fedpub.data.file_report import FileDescribers, FileReport, spread


def describe_h5(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "federated EMNIST, TFF HDF5"
    with EmnistH5(path) as ds:
        counts = [ds.num_examples(c) for c in ds.client_ids]  # checks every client's shapes and dtypes
        if deep:  # reads every client, with EmnistH5's pixel and label range checks
            for client_id in ds.client_ids:
                ds.client_data(client_id)
        client_ids, num_classes = ds.client_ids, ds.num_classes
    report.add("clients", len(client_ids))
    report.add("examples", spread(counts))
    with h5py.File(path, "r") as f, h5_errors(str(path)):
        labels = np.concatenate([f["examples"][c]["label"][()].reshape(-1) for c in client_ids])
    distinct = np.unique(labels)
    report.add("classes", f"{len(distinct)} distinct labels seen; {num_classes} expected (from the file name)")
    if distinct.size and (distinct[0] < 0 or distinct[-1] >= num_classes):
        report.problems.append(f"labels in [{distinct[0]}, {distinct[-1]}], outside [0, {num_classes - 1}]")


def _split_note(split: str) -> str:
    return f", {SPLITS[split]} classes" if split in SPLITS else ""


def _missing_splits(names: set[str]) -> list[str]:
    """The test split of a train split a database holds, and the reverse (a run reads both)."""
    pairs = [(f"{kind}_train", f"{kind}_test") for kind in ("digits_only", "all")]
    return [other for pair in pairs for split, other in (pair, pair[::-1]) if split in names and other not in names]


DESCRIBERS = FileDescribers(
    label="federated EMNIST", hdf5=describe_h5, sqlite_reader=EmnistSqlite, sqlite_split_note=_split_note,
    missing_sqlite_splits=_missing_splits,
)
