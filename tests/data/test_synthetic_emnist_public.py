"""The synthetic EMNIST public writers (``data.synthetic.public`` with ``data.public.pool: heldout``): their own
generator streams and ids, deterministic, another style by default, and the configs that cannot use them refused;
and the private writers' style, set in the same section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from fedpub.config import ConfigError, parse_config
from fedpub.data.emnist import EmnistH5
from fedpub.data.emnist_dataset import SyntheticEmnistPublicConfig
from fedpub.data.generated import SPEC_ATTR
from fedpub.data.synthetic_emnist import (
    PUBLIC_NAME,
    TRAIN_NAME,
    SyntheticEmnistSpec,
    write_synthetic_emnist,
    write_synthetic_emnist_public,
)
from fedpub.data.users import load_data

SPEC = SyntheticEmnistSpec(num_writers=12, min_examples=8, max_examples=20, seed=3)


def _examples(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    with h5py.File(path, "r") as f:
        return {cid: (g["label"][()], g["pixels"][()]) for cid, g in f["examples"].items()}


def test_public_writers_are_other_writers_with_their_own_ids(tmp_path: Path) -> None:
    write_synthetic_emnist(tmp_path, SPEC)
    public = _examples(write_synthetic_emnist_public(tmp_path, SPEC))  # the same spec and seed on purpose
    private = _examples(tmp_path / TRAIN_NAME)
    assert sorted(public) == [f"p0000_{w:02d}" for w in range(SPEC.num_writers)]
    assert not set(public) & set(private)
    # their own generator streams: no public writer repeats the private writer of its index
    for w in range(SPEC.num_writers):
        (pub_labels, _), (priv_labels, _) = public[f"p0000_{w:02d}"], private[f"f0000_{w:02d}"]
        assert not np.array_equal(pub_labels[: len(priv_labels)], priv_labels)
    again = _examples(write_synthetic_emnist_public(tmp_path / "again", SPEC))
    assert again.keys() == public.keys()
    assert all(np.array_equal(again[c][0], public[c][0]) and np.array_equal(again[c][1], public[c][1])
               for c in public)


def test_default_public_style_is_off_distribution(tmp_path: Path) -> None:
    """The default public spec (every writer ambiguous and noisy) leaves far more grey pixels than the private
    writers' default style."""
    public_config = SyntheticEmnistPublicConfig(num_writers=12, min_examples=8, max_examples=20)
    defaults = public_config.model_dump(exclude={"source"})
    write_synthetic_emnist(tmp_path, SPEC)
    public = _examples(write_synthetic_emnist_public(tmp_path, SyntheticEmnistSpec(**defaults)))
    private = _examples(tmp_path / TRAIN_NAME)

    assert _grey(public) > 2 * _grey(private)


def _grey(examples: dict[str, tuple[np.ndarray, np.ndarray]]) -> float:
    """The share of grey pixels (neither ink nor background)."""
    pixels = np.concatenate([x.reshape(-1) for _, x in examples.values()])
    return float(((pixels > 0.05) & (pixels < 0.95)).mean())


SMALL = {"num_writers": 10, "min_examples": 4, "max_examples": 6}


def _data(path: Path, *, source: str = "synthetic_emnist", public: dict[str, Any], writers: dict[str, Any] | None
          ) -> dict[str, Any]:
    synthetic = SMALL if writers is None else SMALL | {"public": writers}
    return {"data": {"source": source, "path": str(path), "synthetic": synthetic, "public": public, "eval_users": "all"}}


def test_heldout_pool_makes_the_public_writers_public(tmp_path: Path) -> None:
    writers = {"num_writers": 4, "min_examples": 4, "max_examples": 6}
    data = load_data(parse_config(_data(tmp_path, public={"pool": "heldout"}, writers=writers)))
    assert data.public_ids == [f"p0000_0{w}" for w in range(4)]
    assert data.private_ids == [f"f0000_0{w}" for w in range(10)]
    with EmnistH5(tmp_path / PUBLIC_NAME) as file:
        assert file.client_ids == data.public_ids
        assert [file.num_examples(c) for c in file.client_ids] == [data.public.num_examples(c)
                                                                  for c in data.public_ids]


@pytest.mark.parametrize(
    ("source", "pool", "writers", "message"),
    [
        ("synthetic_emnist", "heldout", None, r"takes its public writers from data.synthetic.public"),
        ("synthetic_emnist", "train_fraction", {}, r"data.synthetic.public is set but data.public.pool is "
                                                   r"`train_fraction`"),
        ("emnist_h5", "heldout", None, r"have no held-out split"),
    ],
)
def test_public_writers_need_the_heldout_pool_and_it_them(
    tmp_path: Path, source: str, pool: str, writers: dict[str, Any] | None, message: str
) -> None:
    public = {"pool": pool} if pool == "heldout" else {"pool": pool, "fraction": 0.1}
    with pytest.raises(ConfigError, match=message):
        load_data(parse_config(_data(tmp_path, source=source, public=public, writers=writers)))
    assert not (tmp_path / PUBLIC_NAME).exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_writers", 0), ("pixel_noise", 0.9), ("ambiguous_fraction", 1.5), ("class_concentration", 0.0),
     ("min_examples", 90)],
)
def test_public_spec_validation_names_the_field(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"data.synthetic.public.*{field}"):
        parse_config({"data": {"synthetic": {"public": {field: value}}, "public": {"pool": "heldout"}}})


def test_private_writers_style_comes_from_the_config(tmp_path: Path) -> None:
    """``data.synthetic``'s style fields reach the private writers' generator (a harder task for the regime studies
    of issue 36): the file records that spec, and an all-noisy, all-ambiguous style greys many more pixels."""
    hard = {"ambiguous_fraction": 1.0, "pixel_noise": 0.4, "noisy_fraction": 1.0, "class_concentration": 0.3}
    for name, style in (("default", {}), ("hard", hard)):
        load_data(parse_config({"data": {"path": str(tmp_path / name), "synthetic": SMALL | style,
                                          "eval_users": "all"}}))
    with h5py.File(tmp_path / "hard" / TRAIN_NAME, "r") as f:
        assert json.loads(f.attrs[SPEC_ATTR]) == json.loads(SyntheticEmnistSpec(**SMALL, **hard).to_json())
    default, harder = (_examples(tmp_path / name / TRAIN_NAME) for name in ("default", "hard"))
    assert _grey(harder) > 2 * _grey(default)


@pytest.mark.parametrize(("field", "value"), [("pixel_noise", 0.6), ("noisy_fraction", -0.1), ("num_writers", 10_001)])
def test_private_style_validation_names_the_field(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"data.synthetic.{field}"):
        parse_config({"data": {"synthetic": {field: value}}})


@pytest.mark.parametrize("value", [[], "generator", 3])
def test_public_writers_that_are_no_mapping_are_refused_naming_the_field(value: object) -> None:
    with pytest.raises(ConfigError, match=r"data.synthetic.public"):
        parse_config({"data": {"synthetic": {"public": value}, "public": {"pool": "heldout"}}})
