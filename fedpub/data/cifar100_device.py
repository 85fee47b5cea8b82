"""Federated CIFAR-100's formats for one user's data on a device (:mod:`fedpub.data.device_user`): a one-user
``fed_cifar100_*.h5`` file, or a folder of its images as 32×32 RGB PNGs, ``<folder>/<label>/<name>.png``
(:mod:`fedpub.data.image_folder`; the coarse labels are not kept there: the task does not use them). Either is
centre-cropped and standardised as the population's users are (:mod:`fedpub.data.cifar100_preprocessing`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from fedpub.config import ExperimentConfig
from fedpub.data.base import ClientData, FederatedDataset
from fedpub.data.cifar100 import IMAGE_SHAPE, NUM_CLASSES, Cifar100H5
from fedpub.data.cifar100_preprocessing import preprocess
from fedpub.data.cifar100_writers import write_cifar100_h5
from fedpub.data.device_user import DeviceFormats, DeviceUser, ExportFormat, OneUser, pick_user
from fedpub.data.image_folder import read_image_folder, write_image_folder

SIZE = IMAGE_SHAPE[1], IMAGE_SHAPE[0]
"""PIL's (width, height)."""


def read_file(path: Path, config: ExperimentConfig, client_id: str | None) -> DeviceUser:
    with Cifar100H5(path) as reader:
        cid = pick_user(reader.client_ids, client_id, path)
        raw = reader.client_data(cid)
    return DeviceUser(cid, OneUser(cid, ClientData(preprocess(raw.x.numpy()), raw.y), NUM_CLASSES))


def read_folder(folder: Path, config: ExperimentConfig, client_id: str) -> FederatedDataset:
    images, labels = read_image_folder(folder, NUM_CLASSES, "RGB", SIZE)
    return OneUser(client_id, ClientData(preprocess(images), torch.from_numpy(labels)), NUM_CLASSES)


def export(source: Path, client_id: str, out: Path, fmt: ExportFormat) -> Path:
    with Cifar100H5(source) as reader:
        images, labels, coarse = reader.images(client_id), reader.labels(client_id), reader.coarse_labels(client_id)
    if fmt == "tff":
        return write_cifar100_h5(out, {client_id: (images, labels, coarse)})
    return write_image_folder(out, images, labels, "RGB")


DEVICE = DeviceFormats(read_file=read_file, read_folder=read_folder, export=export)
