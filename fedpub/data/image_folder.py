"""A user's images as a plain folder, torchvision's ``ImageFolder`` convention: ``<folder>/<label>/<name>.png``,
``<label>`` the class index, 8-bit PNGs (a device's own data, :mod:`fedpub.data.device_user`). The examples are in
the order of the file names (then labels), so ``00000.png``, ``00001.png``, ... keep a written user's order, and the
pixels read back are the ones written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpub.data.base import DatasetError

IMAGE_SUFFIX = ".png"


def read_image_folder(
    folder: Path, num_classes: int, mode: str, size: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 ``(N, height, width[, channels])``, labels int64 ``(N,)``) of ``folder``, every image of PIL
    ``mode`` (``L`` grayscale, ``RGB``) and ``size`` (width, height); a DatasetError names a file that is not."""
    from PIL import Image  # Pillow: only a device reading images needs it

    for label_dir in (p for p in folder.iterdir() if p.is_dir()):
        if not label_dir.name.isdigit() or int(label_dir.name) >= num_classes:
            raise DatasetError(
                f"{label_dir}: an image folder's subfolders are class indices 0..{num_classes - 1} "
                f"(<folder>/<label>/<name>{IMAGE_SUFFIX})"
            )
    labels, images = [], []
    for path in sorted(folder.glob(f"*/*{IMAGE_SUFFIX}"), key=lambda p: (p.name, int(p.parent.name))):
        with Image.open(path) as image:
            if image.mode != mode or image.size != size:
                raise DatasetError(
                    f"{path}: a {image.mode} image of {image.size[0]}x{image.size[1]} pixels; expected 8-bit "
                    f"{'grayscale' if mode == 'L' else mode} (mode {mode}), {size[0]}x{size[1]}"
                )
            images.append(np.asarray(image, dtype=np.uint8))
        labels.append(int(path.parent.name))
    if not images:
        raise DatasetError(f"{folder} has no <label>/<name>{IMAGE_SUFFIX} images")
    return np.stack(images), np.asarray(labels, dtype=np.int64)


def write_image_folder(folder: Path, images: np.ndarray, labels: np.ndarray, mode: str) -> Path:
    """``<folder>/<label>/<i:05d>.png`` for uint8 ``images`` ``(N, height, width[, channels])`` of PIL ``mode``."""
    from PIL import Image  # Pillow: only writing images needs it

    folder.mkdir(parents=True, exist_ok=True)
    for i, (image, label) in enumerate(zip(images, labels)):
        label_dir = folder / str(int(label))
        label_dir.mkdir(exist_ok=True)
        Image.fromarray(image, mode=mode).save(label_dir / f"{i:05d}{IMAGE_SUFFIX}")
    return folder
