"""Federated EMNIST's formats for one user's data on a device (:mod:`fedpub.data.device_user`): a one-user
``fed_emnist*.h5`` file (``/examples/<id>/{label,pixels}``), or an EMNIST-like folder of images, torchvision's
``ImageFolder`` convention (:mod:`fedpub.data.image_folder`), 28×28 8-bit grayscale. A pixel value v is read as
v / 255 in float32 (TFF's pixels: [0, 1], background 1.0, on a 1/255 grid).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpub.config import ExperimentConfig
from fedpub.data.base import ClientData, DatasetError, FederatedDataset
from fedpub.data.device_user import DeviceFormats, DeviceUser, ExportFormat, OneUser, pick_user
from fedpub.data.emnist import IMAGE_SHAPE, EmnistH5, checked_client_data
from fedpub.data.emnist_writers import write_emnist_h5
from fedpub.data.image_folder import read_image_folder, write_image_folder


def _num_classes(config: ExperimentConfig) -> int:
    return 10 if config.data.only_digits else 62


def read_pixels(folder: Path, num_classes: int) -> ClientData:
    """An EMNIST-like folder as ClientData (x float32 ``(N, 1, 28, 28)`` = v / 255, y int64)."""
    levels, labels = read_image_folder(folder, num_classes, "L", IMAGE_SHAPE)
    x = levels.astype(np.float32) / np.float32(255.0)
    return checked_client_data(x, labels, num_classes, str(folder))


def write_pixels(folder: Path, pixels: np.ndarray, labels: np.ndarray) -> Path:
    """Pixels ``(N, 28, 28)`` in [0, 1] on TFF's 1/255 grid as an EMNIST-like folder; raises DatasetError when a
    pixel is not exactly v / 255 for an 8-bit v (the folder would not read back the same)."""
    levels = np.round(pixels.astype(np.float64) * 255.0)
    if levels.min(initial=0) < 0 or levels.max(initial=0) > 255 or not np.array_equal(
        levels.astype(np.float32) / np.float32(255.0), pixels.astype(np.float32)
    ):
        raise DatasetError("the pixels are not on the 1/255 grid of 8-bit images: a PNG folder cannot hold them")
    return write_image_folder(folder, levels.astype(np.uint8), labels, "L")


def read_file(path: Path, config: ExperimentConfig, client_id: str | None) -> DeviceUser:
    emnist = EmnistH5(path, num_classes=_num_classes(config))
    cid = pick_user(emnist.client_ids, client_id, path)
    return DeviceUser(cid, OneUser(cid, emnist.client_data(cid), emnist.num_classes))


def read_folder(folder: Path, config: ExperimentConfig, client_id: str) -> FederatedDataset:
    num_classes = _num_classes(config)
    return OneUser(client_id, read_pixels(folder, num_classes), num_classes)


def export(source: Path, client_id: str, out: Path, fmt: ExportFormat) -> Path:
    with EmnistH5(source) as emnist:
        data = emnist.client_data(client_id)
    pixels, labels = data.x.squeeze(1).numpy(), data.y.numpy()
    if fmt == "tff":
        return write_emnist_h5(out, {client_id: (pixels, labels)})
    return write_pixels(out, pixels, labels)


DEVICE = DeviceFormats(read_file=read_file, read_folder=read_folder, export=export)
