"""Lazy reader for TFF's federated EMNIST HDF5 files (``/examples/<client_id>/{label,pixels}``).

Pixels are returned as stored by TFF (float32 in [0, 1], background 1.0, ink 0.0: no inversion), reshaped to
``(N, 1, 28, 28)``; labels as int64 ``(N,)``. See ``shared/reference/datasets.md`` §1.1 for the layout.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import torch

from fedpub.data.base import ClientData, DatasetError, TffH5, h5_errors, require_listed

TFF_DATASETS_URL = "https://storage.googleapis.com/tff-datasets-public"
IMAGE_SHAPE = (28, 28)


def _download_hint(path: Path) -> str:
    archive = "fed_emnist_digitsonly.tar.bz2" if "digitsonly" in path.name else "fed_emnist.tar.bz2"
    return (
        f"download {TFF_DATASETS_URL}/{archive} and extract it into {path.parent}, "
        "or run `fedpub run` to use the synthetic quick-start dataset"
    )


def checked_client_data(x: np.ndarray, y: np.ndarray, num_classes: int, where: str) -> ClientData:
    """One client's pixels ``(N, 28, 28)`` and labels ``(N,)`` as ClientData, after checking the labels are
    classes and the pixels lie in [0, 1]; ``where`` names the file and client in the error."""
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise DatasetError(f"{where} has labels in [{y.min()}, {y.max()}], outside [0, {num_classes - 1}]")
    if not np.all((x >= 0.0) & (x <= 1.0)):
        raise DatasetError(f"{where} has pixel values outside [0, 1] or NaN")
    return ClientData(x=torch.from_numpy(x).unsqueeze(1), y=torch.from_numpy(y))


class EmnistH5(TffH5):
    """One TFF federated EMNIST HDF5 file (train or test) as a lazy :class:`FederatedDataset` (:class:`TffH5`: the
    file stays open for the object's lifetime, a process that did not open the handle opens its own)."""

    def __init__(self, path: str | os.PathLike[str], num_classes: int | None = None) -> None:
        self.num_classes = num_classes if num_classes is not None else self._infer_num_classes(Path(path))
        if self.num_classes not in (10, 62):
            raise ValueError(f"num_classes must be 10 or 62 for EMNIST, got {self.num_classes}")
        super().__init__(path, dataset="EMNIST", missing=_download_hint(Path(path)))

    @staticmethod
    def _infer_num_classes(path: Path) -> int:
        return 10 if "digitsonly" in path.name else 62

    def _datasets(self, client_id: str) -> tuple[h5py.Dataset, h5py.Dataset]:
        """The client's (label, pixels) datasets, with shapes and dtypes checked from metadata only."""
        require_listed(self.client_ids, client_id, str(self.path))
        where = f"{self.path}: client {client_id!r}"
        with h5_errors(where):
            group = self._examples().get(client_id)
            if not isinstance(group, h5py.Group):
                raise DatasetError(f"{where} is not a group of 'label' and 'pixels' datasets")
            found = {}
            for name in ("label", "pixels"):
                ds = group.get(name)
                if not isinstance(ds, h5py.Dataset):
                    raise DatasetError(f"{where} has no '{name}' dataset")
                found[name] = ds
            label, pixels = found["label"], found["pixels"]
            if pixels.ndim != 3 or pixels.shape[1:] != IMAGE_SHAPE:
                raise DatasetError(f"{where} has pixels of shape {pixels.shape}, expected (N, 28, 28)")
            if not np.issubdtype(pixels.dtype, np.floating):
                raise DatasetError(f"{where} has pixels of dtype {pixels.dtype}, expected floats")
            if not (label.ndim == 1 or (label.ndim == 2 and label.shape[1] == 1)):
                raise DatasetError(f"{where} has labels of shape {label.shape}, expected (N,) or (N, 1)")
            if not np.issubdtype(label.dtype, np.integer):
                raise DatasetError(f"{where} has labels of dtype {label.dtype}, expected integers")
            if label.shape[0] != pixels.shape[0]:
                raise DatasetError(
                    f"{where} has {label.shape[0]} labels but {pixels.shape[0]} pixel arrays (lengths must match)"
                )
            return label, pixels

    def num_examples(self, client_id: str) -> int:
        """Number of examples of ``client_id``, from the HDF5 metadata (no pixels are read)."""
        return int(self._datasets(client_id)[0].shape[0])

    def client_data(self, client_id: str) -> ClientData:
        """Read one client: x float32 ``(N, 1, 28, 28)`` in [0, 1] (background 1.0), y int64 ``(N,)``."""
        label, pixels = self._datasets(client_id)
        where = f"{self.path}: client {client_id!r}"
        with h5_errors(where):
            y = np.asarray(label[()], dtype=np.int64).reshape(-1)
            x = np.asarray(pixels[()], dtype=np.float32)
        return checked_client_data(x, y, self.num_classes, where)

    def __repr__(self) -> str:
        return f"EmnistH5({str(self.path)!r}, num_classes={self.num_classes}, clients={len(self.client_ids)})"


def load_emnist_split(directory: str | os.PathLike[str], only_digits: bool) -> tuple[EmnistH5, EmnistH5]:
    """Open ``fed_emnist[_digitsonly]_{train,test}.h5`` in ``directory`` as (train, test)."""
    stem = "fed_emnist_digitsonly" if only_digits else "fed_emnist"
    num_classes = 10 if only_digits else 62
    root = Path(directory)
    train = EmnistH5(root / f"{stem}_train.h5", num_classes=num_classes)
    try:
        test = EmnistH5(root / f"{stem}_test.h5", num_classes=num_classes)
    except BaseException:
        train.close()
        raise
    return train, test
