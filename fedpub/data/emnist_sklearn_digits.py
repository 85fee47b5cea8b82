"""Real handwritten digits as synthetic EMNIST's public writers: scikit-learn's bundled ``load_digits``
(``data.synthetic.public: {source: sklearn_digits}`` with ``data.public.pool: heldout``, fedpub issue 36).

``load_digits`` ships inside scikit-learn's wheel (nothing is downloaded): the 1,797 8×8 images of UCI's optdigits
test part, handwritten by 13 people on NIST forms, each pixel the count (0-16) of ink in a 4×4 block of a 32×32
bitmap that NIST's programs had normalised in size. Each image becomes an EMNIST example: the 8×8 frame upsampled
bilinearly into a 20×20 box centred in 28×28 (as MNIST sets a digit in a 20×20 box), TFF polarity (ink 0.0,
background 1.0), float32 on a 1/255 grid; its label is kept. ``load_digits`` keeps no writer ids, so the images are
dealt into ``num_writers`` pseudo-writers of near-equal size by a seeded shuffle (ids ``d0000_00``, ..., apart from
the private ``f...`` and the generated public ``p...``): a real pool, shifted from the generated writers' style,
whose "writers" each mix the 13 real hands. The file is :data:`~fedpub.data.synthetic_emnist.PUBLIC_NAME`, written
atomically and cached by its marker (the source, scikit-learn's version, the writers and seed); a folder holding
another public pool is refused. scikit-learn is optional (``pip install 'fedpub[reproductions]'``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from fedpub.atomic import atomic_path
from fedpub.data.base import DatasetError
from fedpub.data.generated import ensure_generated
from fedpub.data.synthetic_emnist import PUBLIC_NAME, SIZE, Client, write_clients, writer_ids
from fedpub.seeding import numpy_generator

SOURCE = "sklearn_digits"
EXTRA = "reproductions"
"""The optional dependency group of pyproject.toml that installs scikit-learn."""
# Bump when the conversion changes for the same images: cached files from other versions are refused.
LAYOUT_VERSION = 1
BOX = 20  # the digit's box in the 28×28 image, as MNIST's
INK_MAX = 16.0  # load_digits' largest pixel value (16 inked pixels of a 4×4 block)


def sklearn_version() -> str:
    """scikit-learn's version; DatasetError naming the extra when it is not installed."""
    try:
        import sklearn
    except ImportError:
        raise DatasetError(f"data.synthetic.public.source `{SOURCE}` reads scikit-learn's bundled digits: install "
                           f"fedpub's `{EXTRA}` extra (pip install 'fedpub[{EXTRA}]')") from None
    return sklearn.__version__


def load_sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """``load_digits``' images (1797, 8, 8) and labels (refused, naming the extra, without scikit-learn)."""
    sklearn_version()
    from sklearn.datasets import load_digits

    digits = load_digits()
    return np.asarray(digits.images), np.asarray(digits.target)


def _bilinear(size_in: int, size_out: int) -> np.ndarray:
    """(size_out, size_in) bilinear interpolation weights on pixel centres, edges clamped (``align_corners=False``)."""
    source = np.clip((np.arange(size_out) + 0.5) * size_in / size_out - 0.5, 0, size_in - 1)
    low = np.floor(source).astype(int)
    high = np.minimum(low + 1, size_in - 1)
    weights = np.zeros((size_out, size_in))
    np.add.at(weights, (np.arange(size_out), low), 1.0 - (source - low))
    np.add.at(weights, (np.arange(size_out), high), source - low)
    return weights


def to_emnist_layout(images: np.ndarray) -> np.ndarray:
    """``load_digits`` images (n, 8, 8), ink 0-16, as EMNIST examples (n, 28, 28): the frame upsampled bilinearly
    into a centred :data:`BOX` × :data:`BOX` box, ink 0.0 and background 1.0, float32 on a 1/255 grid."""
    rows = _bilinear(images.shape[1], BOX)
    cols = _bilinear(images.shape[2], BOX)
    ink = np.einsum("ij,njk,lk->nil", rows, images / INK_MAX, cols)
    margin = (SIZE - BOX) // 2
    pixels = np.ones((len(images), SIZE, SIZE))
    pixels[:, margin:margin + BOX, margin:margin + BOX] -= ink
    return (np.round(np.clip(pixels, 0.0, 1.0) * 255.0) / 255.0).astype(np.float32)


def pseudo_writers(num_examples: int, num_writers: int, seed: int) -> list[np.ndarray]:
    """The example indices of each of ``num_writers`` (at most ``num_examples``) pseudo-writers: a shuffle seeded by
    ``seed``, dealt into near-equal parts (``load_digits`` keeps no writer ids)."""
    order = numpy_generator(seed, "sklearn_digits_writers").permutation(num_examples)
    return [np.sort(part) for part in np.array_split(order, num_writers)]


def digits_spec_json(num_writers: int, seed: int, sklearn_version: str) -> str:
    """The public file's marker: the source, the conversion's version, scikit-learn's version, writers and seed
    (under ``public_writers``, as the generated public writers' marker is)."""
    spec = {"source": SOURCE, "layout_version": LAYOUT_VERSION, "scikit_learn": sklearn_version,
            "num_writers": num_writers, "seed": seed}
    return json.dumps({"public_writers": spec}, sort_keys=True)


def write_sklearn_digits_public(directory: str | os.PathLike[str], num_writers: int, seed: int) -> Path:
    """``load_digits`` as ``num_writers`` pseudo-writers in ``directory``'s :data:`PUBLIC_NAME`, atomically; returns
    its path."""
    images, labels = load_sklearn_digits()
    pixels = to_emnist_layout(images)
    clients: list[Client] = [(cid, labels[idx], pixels[idx]) for cid, idx in
                             zip(writer_ids(num_writers, "d"), pseudo_writers(len(images), num_writers, seed))]
    path = Path(directory) / PUBLIC_NAME
    with atomic_path(path) as tmp:
        write_clients(tmp, digits_spec_json(num_writers, seed, sklearn_version()), clients)
    return path


def ensure_sklearn_digits_public(directory: str | os.PathLike[str], num_writers: int, seed: int) -> Path:
    """The digits' public file in ``directory``: written when absent, reused when written from the same marker,
    refused (DatasetError, naming what differs) when the folder holds another public pool."""
    root = Path(directory)
    wanted = digits_spec_json(num_writers, seed, sklearn_version())
    (public,) = ensure_generated(
        root, "synthetic EMNIST public writers", (root / PUBLIC_NAME,), wanted,
        lambda: (write_sklearn_digits_public(root, num_writers, seed),),
    )
    return public
