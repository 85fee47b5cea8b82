"""Federated CIFAR-100's images as TFF's baseline task feeds them to the model.

TFF's ``simulation/baselines/cifar100/image_classification_tasks.py`` builds both the train and the evaluation
preprocessing with ``image_classification_preprocessing.create_preprocess_fn(spec, crop_shape=(24, 24, 3))``,
leaving ``distort_image`` at its default ``False``; ``build_image_map`` then, per image: casts to float32, crops to
24×24 with ``tf.image.resize_with_crop_or_pad`` (the centre: offset (32 − 24) // 2 = 4 on each axis) and applies
``tf.image.per_image_standardization``: (x − mean) / max(std, 1/sqrt(24·24·3)), mean and (population) std over
the whole image. fedpub does exactly that, for training and evaluation alike, and returns channels first
``(N, 3, 24, 24)`` float32 for the model. The reductions run in float32 as TF's do, but not in TF's summation
order, so the values agree with TF's to float32 rounding, not bit for bit.

TFF's ``distort_image=True`` variant (a random 24×24 crop and a random left-right flip per image) is not offered:
it is not what TFF's baseline task runs, and a fresh draw every round would have to happen inside local training
(seeded per user and round), not when a user's data is read and cached.
"""

from __future__ import annotations

import numpy as np
import torch

from fedpub.data.base import ClientData, FederatedDataset
from fedpub.data.cifar100 import IMAGE_SHAPE

CROP = 24
"""TFF's ``DEFAULT_CROP_HEIGHT`` and ``DEFAULT_CROP_WIDTH``."""


def center_crop(images: np.ndarray, size: int = CROP) -> np.ndarray:
    """``tf.image.resize_with_crop_or_pad`` to ``size``×``size`` for images ``(N, H, W, C)`` at least that large:
    the window starting at ((H − size) // 2, (W − size) // 2)."""
    top, left = (images.shape[1] - size) // 2, (images.shape[2] - size) // 2
    return images[:, top : top + size, left : left + size, :]


def per_image_standardization(images: torch.Tensor) -> torch.Tensor:
    """``tf.image.per_image_standardization`` of float32 images ``(N, ...)``, each over all its values."""
    flat = images.reshape(images.shape[0], -1)
    mean = flat.mean(dim=1, keepdim=True)
    std = (flat - mean).square().mean(dim=1, keepdim=True).sqrt()
    floor = torch.tensor(1.0 / np.sqrt(flat.shape[1]), dtype=images.dtype)
    return ((flat - mean) / torch.maximum(std, floor)).reshape(images.shape)


def preprocess(images: np.ndarray) -> torch.Tensor:
    """Raw uint8 images ``(N, 32, 32, 3)`` -> centre-cropped, standardised float32 ``(N, 3, 24, 24)``."""
    if images.shape[1:] != IMAGE_SHAPE:
        raise ValueError(f"expected images of shape (N, 32, 32, 3), got {images.shape}")
    cropped = torch.from_numpy(np.ascontiguousarray(center_crop(images))).to(torch.float32)
    return per_image_standardization(cropped).permute(0, 3, 1, 2).contiguous()


class CroppedImages:
    """A :class:`FederatedDataset` view of a CIFAR-100 reader whose clients' images are preprocessed
    (:func:`preprocess`); labels, ids and counts are the reader's."""

    def __init__(self, reader: FederatedDataset) -> None:
        self.reader = reader
        self.client_ids = reader.client_ids
        self.num_classes = reader.num_classes

    def num_examples(self, client_id: str) -> int:
        return self.reader.num_examples(client_id)

    def client_data(self, client_id: str) -> ClientData:
        raw = self.reader.client_data(client_id)
        return ClientData(x=preprocess(raw.x.numpy()), y=raw.y)

    def __repr__(self) -> str:
        return f"CroppedImages({self.reader!r})"
