"""The federated dataset protocol every reader implements, and the error readers raise."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import h5py
import torch


def open_h5(path: Path, missing: str) -> h5py.File:
    """Open an HDF5 file read-only; a missing file raises DatasetError with the ``missing``
    explanation, an unreadable one names the file."""
    if not path.is_file():
        raise DatasetError(missing)
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise DatasetError(f"{path} is not a readable HDF5 file (corrupt or truncated?): {exc}") from exc


@contextmanager
def h5_errors(where: str) -> Iterator[None]:
    """Report an exception from inside h5py (a corrupt file: a broken link, an unreadable object, a dtype it cannot
    convert) as a DatasetError; ``where`` names the file (and the client)."""
    try:
        yield
    except DatasetError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
        raise DatasetError(f"{where}: cannot be read (corrupt or truncated file?): {exc}") from None


def require_listed(client_ids: list[str], client_id: str, where: str) -> None:
    """Raise KeyError (naming ``where``) unless ``client_id`` is in the sorted list ``client_ids``."""
    i = bisect.bisect_left(client_ids, client_id)
    if i == len(client_ids) or client_ids[i] != client_id:
        raise KeyError(f"client {client_id!r} is not in {where}")


class DatasetError(ValueError):
    """A dataset file is missing or malformed; the message names the file and what is wrong."""


@dataclass(frozen=True)
class ClientData:
    """All examples of one client: inputs ``x`` (first axis = examples) and integer targets ``y``."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.y.shape[0])


@runtime_checkable
class FederatedDataset(Protocol):
    """Examples grouped by client, read lazily one client at a time.

    ``client_ids`` is sorted lexicographically (as TFF sorts them); ``num_examples`` is cheap (no example
    data is read), ``client_data`` reads only the requested client.
    """

    client_ids: list[str]
    num_classes: int

    def client_data(self, client_id: str) -> ClientData: ...

    def num_examples(self, client_id: str) -> int: ...


@dataclass(frozen=True)
class Splits:
    """What a source opens (:attr:`fedpub.data.spec.Source.splits`): the training and test users as the task sees
    them, and the held-out users when the config's public pool is the dataset's held-out split."""

    train: FederatedDataset
    test: FederatedDataset
    heldout: FederatedDataset | None = None
