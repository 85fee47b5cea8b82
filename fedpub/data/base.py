"""The federated dataset protocol every reader implements, the error readers raise, and the lazy TFF HDF5 file the
HDF5 readers build on."""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar, runtime_checkable

import h5py
import torch

_T = TypeVar("_T", bound="TffH5")


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


class TffH5:
    """A file in TFF's ``HDF5ClientData`` layout (``/examples/<client_id>/<dataset>``) read lazily: ``client_ids``
    (sorted, as TFF sorts them) are listed when it is opened, nothing else. The handle is opened by each process on
    first use (a forked or unpickled reader opens its own) and released by :meth:`close` or a ``with`` block;
    pickling keeps everything but the handle. ``dataset`` names the data in errors; ``missing`` says what to do
    when the file does not exist."""

    def __init__(self, path: str | os.PathLike[str], *, dataset: str, missing: str) -> None:
        self.path = Path(path)
        self._dataset, self._missing = dataset, missing
        self._file: h5py.File | None = None
        self._group: h5py.Group | None = None
        self._pid = -1
        with h5_errors(str(self.path)):
            self.client_ids: list[str] = sorted(self._examples().keys())

    def _examples(self) -> h5py.Group:
        """The ``/examples`` group, opening the file in this process if needed (kept open: a client's read then
        costs no lookup of the group)."""
        if self._group is None or self._pid != os.getpid():
            self._file = open_h5(self.path, f"{self._dataset} file {self.path} does not exist: {self._missing}")
            self._pid = os.getpid()
            examples = self._file.get("examples")
            if not isinstance(examples, h5py.Group):
                self.close()
                raise DatasetError(f"{self.path} has no 'examples' group: not a TFF federated {self._dataset} file")
            self._group = examples
        return self._group

    def close(self) -> None:
        """Close the HDF5 handle (a later read reopens it)."""
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        self._file, self._group = None, None

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_file": None, "_group": None, "_pid": -1}


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
    public_ids: list[str] | None = None
    """The training users the data itself marks public (a table's ``data.table.public`` column); None: it marks
    none."""
