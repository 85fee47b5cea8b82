"""A table user's own data on a device (:mod:`fedpub.data.device_user`): the node's rows as a Parquet, Arrow or CSV
file (several users' rows: the node's ``client-id`` picks its own), or a Hugging Face dataset folder
(``save_to_disk``), read with the config's ``data.table`` columns and transform, as the server reads the population.
"""

from __future__ import annotations

from pathlib import Path

from fedpub.config import ExperimentConfig
from fedpub.data.base import DatasetError, FederatedDataset
from fedpub.data.device_user import DeviceFormats, DeviceUser, ExportFormat, OneUser, pick_user
from fedpub.data.user_table import UserTable
from fedpub.data.user_table_sources import hf_users, table_users


def _one(users: UserTable, path: Path, client_id: str | None) -> DeviceUser:
    cid = pick_user(users.client_ids, client_id, path)
    return DeviceUser(cid, OneUser(cid, users.client_data(cid), users.num_classes))


def read_file(path: Path, config: ExperimentConfig, client_id: str | None) -> DeviceUser:
    return _one(table_users(path, config.data.table)[0], path, client_id)


def read_folder(folder: Path, config: ExperimentConfig, client_id: str) -> FederatedDataset:
    return _one(hf_users(config, config.data.table.split, folder)[0], folder, client_id).data


def export(source: Path, client_id: str, out: Path, fmt: ExportFormat) -> Path:
    raise DatasetError(f"{source}: `fedpub data export-user` reads TFF files; a table user's device file is its rows, "
                       f"e.g. pyarrow: pq.write_table(table.filter(pc.field(USER_COLUMN) == {client_id!r}), "
                       f"{str(out)!r})")


DEVICE = DeviceFormats(read_file=read_file, read_folder=read_folder, export=export)
