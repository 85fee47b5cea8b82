"""How a config's ``data`` section opens federated CIFAR-100 (:mod:`fedpub.data.cifar100_dataset`): TFF's
``fed_cifar100_{train,test}.h5`` in ``data.path``, or the look-alike files written there first, both seen through
the baseline task's preprocessing (:mod:`fedpub.data.cifar100_preprocessing`).
"""

from __future__ import annotations

from fedpub.config import ExperimentConfig
from fedpub.data.base import Splits
from fedpub.data.cifar100 import load_cifar100_split
from fedpub.data.cifar100_preprocessing import CroppedImages
from fedpub.data.cifar100_writers import SyntheticCifar100Spec, ensure_synthetic_cifar100


def generate_synthetic(config: ExperimentConfig) -> None:
    """Write the look-alike files of ``data.synthetic_cifar100`` into ``data.path`` unless they are there."""
    ensure_synthetic_cifar100(config.data.path, SyntheticCifar100Spec(**config.data.synthetic_cifar100.model_dump()))


def open_h5(config: ExperimentConfig) -> Splits:
    """The train and test clients of ``data.path``, centre-cropped and standardised as TFF's baseline does."""
    train, test = load_cifar100_split(config.data.path)
    return Splits(CroppedImages(train), CroppedImages(test))
