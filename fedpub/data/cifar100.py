"""Lazy reader for TFF's federated CIFAR-100 HDF5 files, ``fed_cifar100_{train,test}.h5``.

The layout is TFF's ``HDF5ClientData`` as its CIFAR-100 loader reads it (google-parfait/tensorflow-federated,
``tensorflow_federated/python/simulation/datasets/cifar100.py`` before the loader moved to SQLite): a group
``examples`` with one subgroup per client id, each holding three datasets of the same length N, the examples their
rows: ``image`` uint8 ``(N, 32, 32, 3)`` (RGB, channels last, values 0-255), ``label`` int64 ``(N,)`` (the 100 fine
classes) and ``coarse_label`` int64 ``(N,)`` (the 20 superclasses). The 500 train clients and 100 test clients
have ids ``"0"`` to ``"499"`` and ``"0"`` to ``"99"``, 100 examples each (TFF's docstring; the partition is Pachinko
allocation over the coarse labels). As for EMNIST (``shared/reference/datasets.md`` §1.1), labels stored ``(N, 1)``
are accepted too.

The reader gives the file's bytes back unchanged: ``images`` uint8 ``(N, 32, 32, 3)``, ``labels`` and
``coarse_labels`` int64 ``(N,)``, and ``client_data`` (x the images, y the labels); the task's crop and
standardisation are :mod:`fedpub.data.cifar100_preprocessing`.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import torch

from fedpub.data.base import ClientData, DatasetError, TffH5, h5_errors, require_listed
from fedpub.data.remote_files import TFF_BASE

IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 100
NUM_COARSE_CLASSES = 20
FIELDS = ("coarse_label", "image", "label")
"""The datasets of every client group (TFF's order: sorted by name)."""
ARCHIVE = "fed_cifar100.tar.bz2"
TRAIN_FILE = "fed_cifar100_train.h5"
TEST_FILE = "fed_cifar100_test.h5"


def _label_ok(ds: h5py.Dataset, n: int) -> bool:
    shape_ok = ds.ndim == 1 or (ds.ndim == 2 and ds.shape[1] == 1)
    return shape_ok and ds.shape[0] == n and np.issubdtype(ds.dtype, np.integer)


class Cifar100H5(TffH5):
    """One TFF federated CIFAR-100 HDF5 file (train or test) as a lazy :class:`FederatedDataset` of raw images
    (:class:`TffH5`): opening it lists the client ids; ``client_data``, ``labels`` and ``coarse_labels`` read one
    client."""

    num_classes = NUM_CLASSES

    def __init__(self, path: str | os.PathLike[str]) -> None:
        path = Path(path)
        super().__init__(
            path, dataset="CIFAR-100",
            missing=f"download {TFF_BASE}/{ARCHIVE} and extract it into {path.parent} (`fedpub data download cifar100 "
            f"--dir {path.parent}`), or use data.source synthetic_cifar100 for look-alike files",
        )

    def _datasets(self, client_id: str) -> dict[str, h5py.Dataset]:
        """The client's three datasets, shapes and dtypes checked from metadata only."""
        require_listed(self.client_ids, client_id, str(self.path))
        where = f"{self.path}: client {client_id!r}"
        with h5_errors(where):
            group = self._examples().get(client_id)
            if not isinstance(group, h5py.Group):
                raise DatasetError(f"{where} is not a group of {', '.join(FIELDS)} datasets")
            found = {}
            for name in FIELDS:
                ds = group.get(name)
                if not isinstance(ds, h5py.Dataset):
                    raise DatasetError(f"{where} has no '{name}' dataset")
                found[name] = ds
            image = found["image"]
            if image.shape[1:] != IMAGE_SHAPE or image.dtype != np.uint8:
                raise DatasetError(
                    f"{where} has images of shape {image.shape} and dtype {image.dtype}, expected (N, 32, 32, 3) uint8"
                )
            for name in ("label", "coarse_label"):
                ds = found[name]
                if not _label_ok(ds, image.shape[0]):
                    raise DatasetError(
                        f"{where} has {name} of shape {ds.shape} and dtype {ds.dtype}: expected {image.shape[0]} "
                        "integers, (N,) or (N, 1), one per image"
                    )
            return found

    def num_examples(self, client_id: str) -> int:
        """Number of examples of ``client_id``, from the HDF5 metadata (no image is read)."""
        return int(self._datasets(client_id)["image"].shape[0])

    def _labels(self, client_id: str, name: str, num_classes: int) -> np.ndarray:
        dataset, where = self._datasets(client_id)[name], f"{self.path}: client {client_id!r}"
        with h5_errors(where):
            values = np.asarray(dataset[()], dtype=np.int64).reshape(-1)
        if values.size and (values.min() < 0 or values.max() >= num_classes):
            raise DatasetError(
                f"{where} has {name} in [{values.min()}, {values.max()}], outside [0, {num_classes - 1}]"
            )
        return values

    def images(self, client_id: str) -> np.ndarray:
        """The client's images exactly as stored: uint8 ``(N, 32, 32, 3)``."""
        dataset = self._datasets(client_id)["image"]
        with h5_errors(f"{self.path}: client {client_id!r}"):
            return np.asarray(dataset[()])

    def labels(self, client_id: str) -> np.ndarray:
        """The client's classes, int64 ``(N,)`` in [0, 100)."""
        return self._labels(client_id, "label", NUM_CLASSES)

    def coarse_labels(self, client_id: str) -> np.ndarray:
        """The client's superclasses, int64 ``(N,)`` in [0, 20)."""
        return self._labels(client_id, "coarse_label", NUM_COARSE_CLASSES)

    def client_data(self, client_id: str) -> ClientData:
        """One client as stored: x uint8 ``(N, 32, 32, 3)``, y the fine labels int64 ``(N,)`` in [0, 100)."""
        return ClientData(x=torch.from_numpy(self.images(client_id)), y=torch.from_numpy(self.labels(client_id)))

    def __repr__(self) -> str:
        return f"Cifar100H5({str(self.path)!r}, clients={len(self.client_ids)})"


def load_cifar100_split(directory: str | os.PathLike[str]) -> tuple[Cifar100H5, Cifar100H5]:
    """Open ``fed_cifar100_train.h5`` and ``fed_cifar100_test.h5`` in ``directory`` as (train, test)."""
    root = Path(directory)
    train = Cifar100H5(root / TRAIN_FILE)
    try:
        test = Cifar100H5(root / TEST_FILE)
    except BaseException:
        train.close()
        raise
    return train, test
