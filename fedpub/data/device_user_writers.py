"""Write one user of a TFF file as the data a device holds (:mod:`fedpub.data.device_user`): a plain folder or a
one-user file in TFF's HDF5 layout. Used by ``fedpub data export-user`` and the tests; a folder read back gives
the user's examples bit for bit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Literal

import h5py
import numpy as np

from fedpub.data.base import DatasetError
from fedpub.data.device_user import IMAGE_SUFFIX, POSTS_FILE
from fedpub.data.emnist import EmnistH5
from fedpub.data.emnist_writers import write_emnist_h5
from fedpub.data.stackoverflow import FIELDS, TAG_COUNT_FILE, WORD_COUNT_FILE, StackOverflowH5, columns_to_examples
from fedpub.data.stackoverflow_writers import write_stackoverflow_h5

DeviceFormat = Literal["folder", "tff"]


def write_image_folder(folder: Path, pixels: np.ndarray, labels: np.ndarray) -> Path:
    """``<folder>/<label>/<i:05d>.png`` for pixels ``(N, 28, 28)`` in [0, 1] on TFF's 1/255 grid; raises
    DatasetError when a pixel is not exactly v / 255 for an 8-bit v (the folder would not read back the same)."""
    from PIL import Image  # Pillow: only writing images needs it

    levels = np.round(pixels.astype(np.float64) * 255.0)
    if levels.min(initial=0) < 0 or levels.max(initial=0) > 255 or not np.array_equal(
        levels.astype(np.float32) / np.float32(255.0), pixels.astype(np.float32)
    ):
        raise DatasetError("the pixels are not on the 1/255 grid of 8-bit images: a PNG folder cannot hold them")
    folder.mkdir(parents=True, exist_ok=True)
    for i, (image, label) in enumerate(zip(levels.astype(np.uint8), labels)):
        label_dir = folder / str(int(label))
        label_dir.mkdir(exist_ok=True)
        Image.fromarray(image, mode="L").save(label_dir / f"{i:05d}{IMAGE_SUFFIX}")
    return folder


def _is_emnist(source: Path) -> bool:
    """Whether the TFF HDF5 file ``source`` holds EMNIST (``pixels``) rather than StackOverflow (``tokens``)."""
    with h5py.File(source, "r") as f:
        examples = f.get("examples")
        first = next(iter(examples.values()), None) if isinstance(examples, h5py.Group) else None
        if not isinstance(first, h5py.Group) or not ({"pixels", "tokens"} & set(first)):
            raise DatasetError(f"{source} is not a TFF EMNIST or StackOverflow HDF5 file with users")
        return "pixels" in first


def export_user(source: Path, client_id: str, out: Path, *, fmt: DeviceFormat = "folder") -> Path:
    """Write user ``client_id`` of the TFF HDF5 file ``source`` (EMNIST or StackOverflow) to ``out``: a folder
    (images, or ``posts.jsonl`` with the count files copied from beside ``source``) or, with ``fmt="tff"``, a
    one-user HDF5 file ``out`` (StackOverflow's count files must then be put beside it)."""
    if out.exists() and (out.is_file() or any(out.iterdir())):
        raise DatasetError(f"{out} exists and is not empty: export the user to a new path")
    if _is_emnist(source):
        with EmnistH5(source) as emnist:
            data = emnist.client_data(client_id)
        pixels, labels = data.x.squeeze(1).numpy(), data.y.numpy()
        if fmt == "tff":
            return write_emnist_h5(out, {client_id: (pixels, labels)})
        return write_image_folder(out, pixels, labels)
    with StackOverflowH5(source) as reader:
        examples = columns_to_examples(reader.columns(client_id, FIELDS))
    if fmt == "tff":
        return write_stackoverflow_h5(out, {client_id: examples})
    out.mkdir(parents=True, exist_ok=True)
    with (out / POSTS_FILE).open("w", encoding="utf-8") as posts:
        for example in examples:
            posts.write(json.dumps(example) + "\n")
    for name in (WORD_COUNT_FILE, TAG_COUNT_FILE):
        if not (source.parent / name).is_file():
            raise DatasetError(f"{source.parent / name} is missing: a device needs the public vocabularies")
        shutil.copyfile(source.parent / name, out / name)
    return out
