"""scikit-learn's real digits as synthetic EMNIST's public writers (``data.synthetic.public: {source:
sklearn_digits}``): EMNIST's layout, pseudo-writer ids, determinism, labels kept, the refusal without scikit-learn,
config errors naming the field, and a folder holding another public pool refused."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from fedpub.config import ConfigError, parse_config
from fedpub.data.base import DatasetError
from fedpub.data.emnist_sklearn_digits import (
    ensure_sklearn_digits_public,
    load_sklearn_digits,
    pseudo_writers,
    to_emnist_layout,
    write_sklearn_digits_public,
)
from fedpub.data.synthetic_emnist import PUBLIC_NAME, SyntheticEmnistSpec, ensure_synthetic_emnist_public
from fedpub.data.users import load_data

def _examples(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    with h5py.File(path, "r") as f:
        return {cid: (g["label"][()], g["pixels"][()]) for cid, g in f["examples"].items()}


def test_layout_is_emnist_s() -> None:
    """28×28 float32 in [0, 1] on a 1/255 grid, ink 0.0 and background 1.0, the digit in the centred 20×20 box."""
    images, _ = load_sklearn_digits()
    pixels = to_emnist_layout(images)
    assert pixels.shape == (1797, 28, 28) and pixels.dtype == np.float32
    assert pixels.min() == 0.0 and pixels.max() == 1.0
    np.testing.assert_allclose(pixels * 255, np.round(pixels * 255), atol=1e-3)
    outside = np.ones((28, 28), dtype=bool)
    outside[4:24, 4:24] = False
    assert (pixels[:, outside] == 1.0).all()
    # polarity and place: a fully inked frame fills the box with ink; one inked corner darkens the box's corner
    full, corner = np.full((1, 8, 8), 16.0), np.zeros((1, 8, 8))
    corner[0, 0, 0] = 16.0
    assert (to_emnist_layout(full)[0, 4:24, 4:24] == 0.0).all()
    assert to_emnist_layout(corner)[0, 4, 4] == 0.0 and to_emnist_layout(corner)[0, 10:, :].min() == 1.0
    assert to_emnist_layout(np.zeros((1, 8, 8))).min() == 1.0


def test_pseudo_writers_ids_labels_and_determinism(tmp_path: Path) -> None:
    images, labels = load_sklearn_digits()
    written = _examples(write_sklearn_digits_public(tmp_path, 30, seed=5))
    assert list(written) == [f"d0000_{w:02d}" for w in range(30)]
    parts = pseudo_writers(len(images), 30, seed=5)
    assert sorted(np.concatenate(parts).tolist()) == list(range(1797))  # every image, once
    assert {len(p) for p in parts} == {59, 60}
    pixels = to_emnist_layout(images)
    for (label, px), idx in zip(written.values(), parts):
        np.testing.assert_array_equal(label, labels[idx])  # labels kept with their images
        np.testing.assert_array_equal(px, pixels[idx])
    again = _examples(write_sklearn_digits_public(tmp_path / "again", 30, seed=5))
    assert all(np.array_equal(again[c][1], written[c][1]) for c in written)
    other = pseudo_writers(len(images), 30, seed=6)
    assert not np.array_equal(other[0], parts[0])


def test_refused_without_scikit_learn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_sklearn(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "sklearn" or name.startswith("sklearn."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    with pytest.raises(DatasetError, match=r"source `sklearn_digits`.*pip install 'fedpub\[reproductions\]'"):
        ensure_sklearn_digits_public(tmp_path, 10, 0)
    assert not (tmp_path / PUBLIC_NAME).exists()


def _config(path: Path, public: dict[str, Any]) -> dict[str, Any]:
    synthetic = {"num_writers": 10, "min_examples": 4, "max_examples": 6, "public": public}
    return {"data": {"source": "synthetic_emnist", "path": str(path), "synthetic": synthetic,
                     "public": {"pool": "heldout"}, "eval_users": "all"}}


def test_heldout_pool_of_real_digits(tmp_path: Path) -> None:
    data = load_data(parse_config(_config(tmp_path, {"source": "sklearn_digits", "num_writers": 4})))
    assert data.public_ids == [f"d0000_0{w}" for w in range(4)]
    assert sum(data.public.num_examples(c) for c in data.public_ids) == 1797
    assert data.private_ids == [f"f0000_0{w}" for w in range(10)]


@pytest.mark.parametrize(
    ("public", "message"),
    [
        ({"source": "sklearn_digits", "min_examples": 4}, r"unknown key `data.synthetic.public.min_examples`; "
                                                          r"allowed keys here: source, num_writers, seed"),
        ({"source": "sklearn_digits", "num_writers": 1798}, r"data.synthetic.public.num_writers`.*1797"),
        ({"source": "emnist"}, r"data.synthetic.public`: its source must be generator \(the default\) or "
                               r"sklearn_digits"),
    ],
)
def test_config_errors_name_the_field(public: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(_config(Path("unused"), public))


def test_folder_with_another_public_pool_is_refused(tmp_path: Path) -> None:
    ensure_synthetic_emnist_public(tmp_path, SyntheticEmnistSpec(num_writers=3, min_examples=4, max_examples=6))
    with pytest.raises(DatasetError, match=r"generated from another spec.*sklearn_digits"):
        ensure_sklearn_digits_public(tmp_path, 3, 0)
    digits = tmp_path / "digits"
    ensure_sklearn_digits_public(digits, 3, 0)
    ensure_sklearn_digits_public(digits, 3, 0)  # the same marker: reused
    with pytest.raises(DatasetError, match=r"generated from another spec.*'seed': 0.*'seed': 1"):
        ensure_sklearn_digits_public(digits, 3, 1)
