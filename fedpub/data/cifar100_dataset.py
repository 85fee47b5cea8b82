"""Federated CIFAR-100's declaration (TFF ``simulation/datasets/cifar100.py``, its HDF5 loader, and the baseline
``simulation/baselines/cifar100/``): TFF's ``fed_cifar100_{train,test}.h5`` files and look-alike files in the same
layout, 100-class classification on 24×24 centre crops, TFF's ResNet-18 with group norm, and TFF's archive.
Light: names only, the code is imported when a config uses it.
"""

from __future__ import annotations

from pydantic import Field

from fedpub.config_section import Section
from fedpub.data.remote_files import tff_file
from fedpub.data.spec import Dataset, ModelDeclaration, Source, TaskDeclaration


class SyntheticCifar100Config(Section):
    """Offline look-alike CIFAR-100 files in TFF's HDF5 layout (TFF's real split: 500 and 100 clients of 100)."""

    num_clients: int = Field(500, ge=2)
    test_clients: int = Field(100, ge=1)
    examples_per_client: int = Field(100, ge=1)
    seed: int = 0


_SOURCES = "fedpub.data.cifar100_sources"

CIFAR100 = Dataset(
    name="cifar100",
    title="federated CIFAR-100 (TFF): 32x32 colour images in 100 classes, partitioned by Pachinko allocation",
    reference="tensorflow_federated/python/simulation/datasets/cifar100.py (HDF5 loader) and baselines/cifar100/",
    sources=(
        Source("cifar100_h5", "a directory with fed_cifar100_train.h5 and fed_cifar100_test.h5", f"{_SOURCES}:open_h5"),
        Source(
            "synthetic_cifar100",
            "look-alike files written there in TFF's HDF5 layout (fed_cifar100_{train,test}.h5) from "
            "data.synthetic_cifar100",
            f"{_SOURCES}:open_h5",
            generate=f"{_SOURCES}:generate_synthetic",
        ),
    ),
    tasks=(
        TaskDeclaration(
            "classification", "100 classes on 24x24 centre crops, standardised per image: softmax cross-entropy, "
            "accuracy", "fedpub.tasks:CLASSIFICATION",
        ),
    ),
    models=(
        ModelDeclaration(
            "cifar100_resnet18_gn", "TFF's ResNet-18 with group norm (2 groups), 11.2M parameters",
            "fedpub.models.cifar100:ResNet18GroupNorm", normalization=("GroupNorm",),
        ),
    ),
    files=(
        tff_file(
            "fed_cifar100.tar.bz2",
            "e8575e22c038ecef1ce6c7d492d7abee7da13b1e1ba9b70a7fc18531ba7590de",
            mirror=True,
            members=("fed_cifar100_train.h5", "fed_cifar100_test.h5"),
        ),
    ),
    client_fields=frozenset({"coarse_label", "image", "label"}),
    describers="fedpub.data.cifar100_files:DESCRIBERS",
    config_fields={"synthetic_cifar100": (SyntheticCifar100Config, SyntheticCifar100Config())},
    device="fedpub.data.cifar100_device:DEVICE",
)
