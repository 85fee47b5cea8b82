"""Write one user of a TFF file as the data a device holds (:mod:`fedpub.data.device_user`): the dataset's plain
folder or a one-user file in TFF's layout, the dataset recognised from the file's client groups. Used by ``fedpub
data export-user`` and the tests; a folder read back gives the user's examples bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import h5py

from fedpub.data import registry
from fedpub.data.base import DatasetError
from fedpub.data.device_user import DeviceFormats, ExportFormat
from fedpub.data.spec import Dataset, resolve


def _dataset_of(source: Path) -> Dataset:
    """The registered dataset whose HDF5 layout ``source`` has (from its first client's datasets)."""
    known = ", ".join(f"{d.name} ({', '.join(sorted(d.client_fields))})" for d in registry.DATASETS)
    try:
        with h5py.File(source, "r") as f:
            examples = f.get("examples")
            first = next(iter(examples.values()), None) if isinstance(examples, h5py.Group) else None
            fields = set(first) if isinstance(first, h5py.Group) else set()
    except OSError as exc:
        raise DatasetError(f"{source} is not a readable HDF5 file: {exc}") from None
    dataset = registry.dataset_of_client_fields(fields)
    if dataset is None:
        raise DatasetError(f"{source} is not a TFF HDF5 file with users of a known dataset: {known}")
    return dataset


def export_user(source: Path, client_id: str, out: Path, *, fmt: ExportFormat = "folder") -> Path:
    """Write user ``client_id`` of the TFF HDF5 file ``source`` to ``out``: the dataset's folder or, with
    ``fmt="tff"``, a one-user HDF5 file ``out``."""
    if out.exists() and (out.is_file() or any(out.iterdir())):
        raise DatasetError(f"{out} exists and is not empty: export the user to a new path")
    dataset = _dataset_of(source)
    if dataset.device is None:
        raise DatasetError(f"{source} holds {dataset.name} users, which declares no format for a device's own data")
    formats: DeviceFormats = resolve(dataset.device)
    return formats.export(source, client_id, out, fmt)
