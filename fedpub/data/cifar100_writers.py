"""Write federated CIFAR-100 in TFF's HDF5 layout (:mod:`fedpub.data.cifar100`), and the look-alike files the
offline config and the tests train on.

:func:`write_cifar100_h5` writes given clients: ``/examples/<client_id>/{coarse_label int64, image uint8
(N, 32, 32, 3), label int64}``, read back bit for bit by :class:`~fedpub.data.cifar100.Cifar100H5`.

:func:`write_synthetic_cifar100` writes deterministic look-alike data (no CIFAR-100 image in it): each of the 100
classes is a seeded smooth colour pattern (a few random plane waves per channel); an example is its class's pattern
moved by up to ``max_shift`` pixels, with its own contrast and brightness and Gaussian pixel noise, rounded to 8
bits. Clients get their labels as TFF partitioned the real data (Pachinko allocation): a coarse-label mix drawn from
Dirichlet(0.1) over the 20 superclasses, and per superclass a fine-label mix from Dirichlet(10) over its 5 classes.
The superclass of class c is c // 5 here (not CIFAR-100's own grouping). Client ids are ``"0"``, ``"1"``, ... as in
TFF; the spec is stored in each file, so a config asking for another spec in the same folder is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import h5py
import numpy as np

from fedpub.atomic import atomic_path
from fedpub.data.cifar100 import IMAGE_SHAPE, NUM_CLASSES, NUM_COARSE_CLASSES, TEST_FILE, TRAIN_FILE
from fedpub.data.generated import SPEC_ATTR, ensure_generated
from fedpub.seeding import numpy_generator

Cifar100Clients = Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
"""``{client_id: (images uint8 (N, 32, 32, 3), labels (N,), coarse labels (N,))}``, written in mapping order."""

GENERATOR_VERSION = 1  # bump when the same spec would generate other data
FINE_PER_COARSE = NUM_CLASSES // NUM_COARSE_CLASSES
WAVES = 4  # plane waves per channel of a class pattern


def write_cifar100_h5(path: str | os.PathLike[str], clients: Cifar100Clients, *, attrs: Mapping[str, str] = {}) -> Path:
    """Write one split (train or test) as a TFF federated CIFAR-100 HDF5 file, atomically; ``attrs`` are stored on
    the file."""
    path = Path(path)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs.update(attrs)
        examples = f.create_group("examples")
        for client_id, (images, labels, coarse) in clients.items():
            images, labels, coarse = np.asarray(images), np.asarray(labels), np.asarray(coarse)
            if not isinstance(client_id, str) or not client_id:
                raise ValueError(f"client ids must be non-empty strings, got {client_id!r}")
            if images.dtype != np.uint8 or images.shape[1:] != IMAGE_SHAPE:
                raise ValueError(
                    f"client {client_id!r}: images of shape {images.shape} and dtype {images.dtype}, "
                    "expected (N, 32, 32, 3) uint8"
                )
            if labels.shape != (len(images),) or coarse.shape != (len(images),):
                raise ValueError(f"client {client_id!r}: expected one label and one coarse label per image")
            group = examples.create_group(client_id)
            group.create_dataset("coarse_label", data=coarse.astype(np.int64), track_times=False)
            group.create_dataset("image", data=images, track_times=False)
            group.create_dataset("label", data=labels.astype(np.int64), track_times=False)
    return path


@dataclass(frozen=True)
class SyntheticCifar100Spec:
    """What to generate: ``num_clients`` train and ``test_clients`` test clients of ``examples_per_client`` each
    (TFF: 500, 100 and 100). The same spec always gives the same files."""

    num_clients: int = 500
    test_clients: int = 100
    examples_per_client: int = 100
    max_shift: int = 3
    pixel_noise: float = 24.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_clients", "test_clients", "examples_per_client"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.max_shift <= 8:
            raise ValueError(f"max_shift must be in [0, 8] (the crop keeps 24 of 32 pixels), got {self.max_shift}")
        if not 0.0 <= self.pixel_noise <= 128.0:
            raise ValueError(f"pixel_noise must be in [0, 128] (8-bit levels), got {self.pixel_noise}")

    def to_json(self) -> str:
        return json.dumps({"generator_version": GENERATOR_VERSION, **asdict(self)}, sort_keys=True)


def class_patterns(seed: int) -> np.ndarray:
    """The 100 classes' smooth colour patterns, float64 ``(100, 32, 32, 3)`` in about [-1, 1]."""
    rng = numpy_generator(seed, "synthetic_cifar100", "patterns")
    grid = np.stack(np.meshgrid(np.arange(32), np.arange(32), indexing="ij"), axis=-1) / 32.0  # (32, 32, 2)
    frequencies = rng.normal(0.0, 3.0, size=(NUM_CLASSES, 3, WAVES, 2))
    phases = rng.uniform(0.0, 2 * np.pi, size=(NUM_CLASSES, 3, WAVES))
    waves = np.cos(2 * np.pi * np.einsum("hwd,kcjd->kchwj", grid, frequencies) + phases[:, :, None, None, :])
    return waves.mean(axis=-1).transpose(0, 2, 3, 1) * np.sqrt(2.0)  # (classes, 32, 32, channels)


def _client(spec: SyntheticCifar100Spec, patterns: np.ndarray, split: str, index: int) -> tuple[np.ndarray, ...]:
    rng = numpy_generator(spec.seed, "synthetic_cifar100", split, index)
    n = spec.examples_per_client
    coarse_mix = rng.dirichlet(np.full(NUM_COARSE_CLASSES, 0.1))
    fine_mix = rng.dirichlet(np.full(FINE_PER_COARSE, 10.0), size=NUM_COARSE_CLASSES)
    coarse = rng.choice(NUM_COARSE_CLASSES, size=n, p=coarse_mix)
    fine = np.array([rng.choice(FINE_PER_COARSE, p=fine_mix[c]) for c in coarse]) + FINE_PER_COARSE * coarse
    shifts = rng.integers(-spec.max_shift, spec.max_shift + 1, size=(n, 2))
    contrast = rng.uniform(40.0, 80.0, size=(n, 1, 1, 1))
    brightness = rng.uniform(90.0, 160.0, size=(n, 1, 1, 1))
    moved = np.stack([np.roll(patterns[c], tuple(s), axis=(0, 1)) for c, s in zip(fine, shifts)])
    values = brightness + contrast * moved + rng.normal(0.0, spec.pixel_noise, size=moved.shape)
    images = np.clip(np.rint(values), 0, 255).astype(np.uint8)
    return images, fine.astype(np.int64), coarse.astype(np.int64)


def write_synthetic_cifar100(directory: str | os.PathLike[str], spec: SyntheticCifar100Spec) -> tuple[Path, Path]:
    """Generate ``spec`` into ``directory`` as ``fed_cifar100_{train,test}.h5``; returns (train, test)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    patterns = class_patterns(spec.seed)
    attrs = {SPEC_ATTR: spec.to_json()}
    written = []
    for name, split, count in ((TRAIN_FILE, "train", spec.num_clients), (TEST_FILE, "test", spec.test_clients)):
        clients = {str(i): _client(spec, patterns, split, i) for i in range(count)}
        written.append(write_cifar100_h5(root / name, clients, attrs=attrs))
    return written[0], written[1]


def ensure_synthetic_cifar100(directory: str | os.PathLike[str], spec: SyntheticCifar100Spec) -> tuple[Path, Path]:
    """The look-alike train/test files in ``directory``: generated from ``spec`` when absent, reused when generated
    from it, refused (DatasetError, the differing fields named) when generated from another spec or not by fedpub."""
    root = Path(directory)
    train, test = ensure_generated(
        root, "synthetic CIFAR-100", (root / TRAIN_FILE, root / TEST_FILE), spec.to_json(),
        lambda: write_synthetic_cifar100(root, spec),
    )
    return train, test
