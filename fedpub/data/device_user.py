"""One user's own data on a device (a Flower SuperNode's ``data-path``), read into the same :class:`ClientData`
the population's readers give, with the same preprocessing (docs/deployment.md, "Data on a device").

The formats are the dataset's (its declaration's :class:`DeviceFormats`, :mod:`fedpub.data.registry`): a file in
TFF's layout holding one user (a file of several users needs the node's ``client-id`` to pick one), or a plain
folder, whose user id is the node's ``client-id``, else the folder's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fedpub.config import ExperimentConfig
from fedpub.data import registry
from fedpub.data.base import ClientData, DatasetError, FederatedDataset
from fedpub.data.spec import resolve

ExportFormat = Literal["folder", "tff"]
"""How ``fedpub data export-user`` writes a user: the dataset's plain folder, or a one-user file in TFF's layout."""


@dataclass(frozen=True)
class DeviceUser:
    """The user a device holds: its id and a one-user dataset (``client_ids == [client_id]``) of the task's
    view, so the model's class count and the preprocessing are those of the population's readers."""

    client_id: str
    data: FederatedDataset


@dataclass(frozen=True)
class DeviceFormats:
    """A dataset's formats for one user's data on a device."""

    read_file: Callable[[Path, ExperimentConfig, str | None], DeviceUser]
    """A file in TFF's layout, the user picked by ``client-id`` (needed when it holds several users)."""
    read_folder: Callable[[Path, ExperimentConfig, str], FederatedDataset]
    """The dataset's plain folder, holding the user named by the second argument."""
    export: Callable[[Path, str, Path, ExportFormat], Path]
    """Write user ``client_id`` of a TFF file ``source`` to ``out`` as a folder or a one-user TFF file."""


class OneUser:
    """A :class:`FederatedDataset` of one user whose examples are already decoded."""

    def __init__(self, client_id: str, data: ClientData, num_classes: int) -> None:
        self.client_ids = [client_id]
        self.num_classes = num_classes
        self._data = data

    def client_data(self, client_id: str) -> ClientData:
        if client_id != self.client_ids[0]:
            raise KeyError(f"this device holds user {self.client_ids[0]!r}, not {client_id!r}")
        return self._data

    def num_examples(self, client_id: str) -> int:
        return len(self.client_data(client_id))


def pick_user(client_ids: list[str], wanted: str | None, path: Path) -> str:
    """``wanted`` if the file at ``path`` holds it, else its one user; a DatasetError names the users otherwise."""
    if wanted is not None:
        if wanted not in client_ids:
            raise DatasetError(f"{path} does not hold user {wanted!r} (it holds {', '.join(client_ids[:10])})")
        return wanted
    if len(client_ids) != 1:
        raise DatasetError(
            f"{path} holds {len(client_ids)} users ({', '.join(client_ids[:10])}): name this device's user with "
            "the node config's `client-id`"
        )
    return client_ids[0]


def device_formats(config: ExperimentConfig) -> DeviceFormats:
    """The device formats of the dataset ``data.source`` belongs to; a DatasetError when it declares none."""
    dataset, _ = registry.source(config.data.source)
    if dataset.device is None:
        holders = ", ".join(d.name for d in registry.DATASETS if d.device is not None)
        raise DatasetError(f"dataset {dataset.name} declares no format for a device's own data (datasets that do: "
                           f"{holders})")
    formats: DeviceFormats = resolve(dataset.device)
    return formats


def load_device_user(path: str | Path, config: ExperimentConfig, client_id: str | None = None) -> DeviceUser:
    """The user at ``path`` (a file or folder of the config's dataset) as the task of ``config`` sees it;
    ``client_id`` picks a user of a several-user file and names a folder's user (default: the folder's name)."""
    path = Path(path)
    formats = device_formats(config)
    if path.is_file():
        return formats.read_file(path, config, client_id)
    if not path.is_dir():
        raise DatasetError(f"the device's data-path {path} does not exist")
    cid = client_id if client_id is not None else path.name
    return DeviceUser(cid, formats.read_folder(path, config, cid))
