"""Federated CIFAR-100 on files written here in TFF's HDF5 layout: the reader gives the stored bytes back, lazily and
naming the file and client on a malformed one; the preprocessing is TFF's baseline (centre crop 24×24, per-image
standardisation); the look-alike generator is deterministic and guarded; a device's user reads back as the
population's reader gives it."""

from __future__ import annotations

import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from fedpub.config import parse_config
from fedpub.data.base import DatasetError
from fedpub.data.cifar100 import TEST_FILE, TRAIN_FILE, Cifar100H5, load_cifar100_split
from fedpub.data.cifar100_preprocessing import CroppedImages, center_crop, per_image_standardization, preprocess
from fedpub.data.cifar100_writers import (
    SyntheticCifar100Spec,
    ensure_synthetic_cifar100,
    write_cifar100_h5,
    write_synthetic_cifar100,
)
from fedpub.data.device_user import load_device_user
from fedpub.data.device_user_writers import export_user
from fedpub.data.users import load_data


def random_clients(seed: int, sizes: dict[str, int]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    clients = {}
    for client_id, n in sizes.items():
        labels = rng.integers(0, 100, size=n)
        clients[client_id] = (rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8), labels, labels // 5)
    return clients


def test_the_reader_gives_back_the_written_bytes_lazily_in_tffs_order(tmp_path: Path) -> None:
    clients = random_clients(0, {"2": 3, "10": 1, "0": 5, "1": 0})
    path = write_cifar100_h5(tmp_path / TRAIN_FILE, clients)
    with Cifar100H5(path) as reader:
        assert reader.client_ids == ["0", "1", "10", "2"] and reader.num_classes == 100  # sorted as strings
        for client_id, (images, labels, coarse) in clients.items():
            assert reader.num_examples(client_id) == len(labels)
            data = reader.client_data(client_id)
            assert data.x.dtype == torch.uint8 and data.y.dtype == torch.int64
            assert np.array_equal(data.x.numpy(), images) and np.array_equal(data.y.numpy(), labels)
            assert np.array_equal(reader.coarse_labels(client_id), coarse)
        with pytest.raises(KeyError, match="client '3' is not in"):
            reader.client_data("3")
    with h5py.File(path, "r") as f:  # the layout TFF's HDF5ClientData reads, checked without the reader
        group = f["examples"]["0"]
        assert sorted(group) == ["coarse_label", "image", "label"]
        assert group["image"].dtype == np.uint8 and group["image"].shape == (5, 32, 32, 3)
        assert group["label"].dtype == np.int64 and group["coarse_label"].dtype == np.int64
        assert group["image"][()].tobytes() == Cifar100H5(path).client_data("0").x.numpy().tobytes()


def test_a_pickled_reader_reopens_the_file_and_column_labels_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / TRAIN_FILE
    with h5py.File(path, "w") as f:  # labels stored (N, 1), as TFF's docstring describes them
        group = f.create_group("examples").create_group("7")
        group["image"] = np.full((2, 32, 32, 3), 9, dtype=np.uint8)
        group["label"] = np.array([[99], [0]], dtype=np.int64)
        group["coarse_label"] = np.array([[19], [0]], dtype=np.int64)
    reader = pickle.loads(pickle.dumps(Cifar100H5(path)))
    assert reader.client_data("7").y.tolist() == [99, 0] and reader.coarse_labels("7").tolist() == [19, 0]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda g: g.__delitem__("coarse_label"), "client '0' has no 'coarse_label' dataset"),
        (lambda g: (g.__delitem__("image"), g.create_dataset("image", data=np.zeros((2, 32, 32, 3), np.float32))),
         r"images of shape \(2, 32, 32, 3\) and dtype float32, expected \(N, 32, 32, 3\) uint8"),
        (lambda g: (g.__delitem__("label"), g.create_dataset("label", data=np.zeros(3, np.int64))),
         "label of shape \\(3,\\) and dtype int64: expected 2 integers"),
        (lambda g: g["label"].__setitem__(0, 100), r"client '0' has label in \[\d+, 100\], outside \[0, 99\]"),
    ],
)
def test_a_malformed_client_is_refused_naming_the_file_and_client(tmp_path: Path, edit, message: str) -> None:
    path = write_cifar100_h5(tmp_path / TEST_FILE, random_clients(1, {"0": 2}))
    with h5py.File(path, "a") as f:
        edit(f["examples"]["0"])
    with pytest.raises(DatasetError, match=message) as error, Cifar100H5(path) as reader:
        reader.client_data("0")
    assert str(path) in str(error.value)


def test_missing_files_say_where_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="fed_cifar100_train.h5 does not exist: download .*fed_cifar100.tar.bz2"):
        load_cifar100_split(tmp_path)


def test_the_preprocessing_is_tffs_centre_crop_and_per_image_standardisation() -> None:
    images = np.random.default_rng(2).integers(0, 256, size=(3, 32, 32, 3), dtype=np.uint8)
    assert np.array_equal(center_crop(images), images[:, 4:28, 4:28, :])  # resize_with_crop_or_pad: offset (32-24)//2
    x = preprocess(images)
    assert x.shape == (3, 3, 24, 24) and x.dtype == torch.float32
    crop = images[:, 4:28, 4:28, :].astype(np.float64)
    mean = crop.mean(axis=(1, 2, 3), keepdims=True)
    std = np.maximum(crop.std(axis=(1, 2, 3), keepdims=True), 1 / np.sqrt(24 * 24 * 3))
    expected = ((crop - mean) / std).transpose(0, 3, 1, 2)  # channels first
    assert np.allclose(x.numpy(), expected, atol=1e-5)
    assert float(x[1, 2, 5, 7]) == pytest.approx(expected[1, 2, 5, 7], abs=1e-5)  # image 1, blue, row 5+4, col 7+4
    uniform = per_image_standardization(torch.full((1, 24, 24, 3), 200.0))  # std floored at 1/sqrt(N): no NaN
    assert torch.equal(uniform, torch.zeros_like(uniform))
    with pytest.raises(ValueError, match=r"\(N, 32, 32, 3\)"):
        preprocess(images[:, :28])


def test_the_look_alike_files_are_deterministic_labelled_like_tffs_and_guarded(tmp_path: Path) -> None:
    spec = SyntheticCifar100Spec(num_clients=4, test_clients=2, examples_per_client=6, seed=3)
    first = write_synthetic_cifar100(tmp_path / "a", spec)
    again = write_synthetic_cifar100(tmp_path / "b", spec)
    train, test = load_cifar100_split(tmp_path / "a")
    assert train.client_ids == ["0", "1", "2", "3"] and test.client_ids == ["0", "1"]
    for client_id in train.client_ids:
        assert train.num_examples(client_id) == 6
        assert np.array_equal(train.coarse_labels(client_id), train.labels(client_id) // 5)
    with Cifar100H5(again[0]) as other:
        assert all(np.array_equal(train.images(c), other.images(c)) for c in train.client_ids)
    assert first[0].read_bytes() != write_synthetic_cifar100(tmp_path / "c", SyntheticCifar100Spec(
        num_clients=4, test_clients=2, examples_per_client=6, seed=4))[0].read_bytes()
    assert ensure_synthetic_cifar100(tmp_path / "a", spec) == first  # reused
    with pytest.raises(DatasetError, match="generated from another spec .*examples_per_client: 6 → 7"):
        ensure_synthetic_cifar100(tmp_path / "a", SyntheticCifar100Spec(
            num_clients=4, test_clients=2, examples_per_client=7, seed=3))
    with pytest.raises(ValueError, match="max_shift must be in"):
        SyntheticCifar100Spec(max_shift=9)


def test_the_config_opens_cropped_views_of_the_look_alike_files(tmp_path: Path) -> None:
    config = parse_config({
        "data": {"source": "synthetic_cifar100", "path": str(tmp_path),
                 "synthetic_cifar100": {"num_clients": 5, "test_clients": 2, "examples_per_client": 4},
                 "public": {"fraction": 0.2}},
        "model": {"name": "cifar100_resnet18_gn"},
    })
    data = load_data(config)
    assert len(data.private_ids) == 4 and len(data.public_ids) == 1 and data.train.num_classes == 100
    with Cifar100H5(tmp_path / TRAIN_FILE) as raw:
        expected = preprocess(raw.images("3"))
    assert isinstance(data.test, CroppedImages) and torch.equal(data.train.client_data("3").x, expected)


@pytest.mark.parametrize("fmt", ["folder", "tff"])
def test_an_exported_user_reads_back_as_the_population_sees_it(tmp_path: Path, fmt: str) -> None:
    write_synthetic_cifar100(tmp_path / "world", SyntheticCifar100Spec(num_clients=3, test_clients=1,
                                                                        examples_per_client=5))
    config = parse_config({"data": {"source": "cifar100_h5", "path": str(tmp_path / "world"), "eval_users": "all"},
                           "model": {"name": "cifar100_resnet18_gn"}})  # 3 users: none to hold out for evaluation
    population = load_data(config).train
    out = export_user(tmp_path / "world" / TRAIN_FILE, "1", tmp_path / ("me" if fmt == "folder" else "me.h5"), fmt=fmt)
    user = load_device_user(out, config, client_id="1")
    assert user.client_id == "1" and user.data.num_classes == 100
    mine, theirs = user.data.client_data("1"), population.client_data("1")
    assert torch.equal(mine.x, theirs.x) and torch.equal(mine.y, theirs.y)
    if fmt == "folder":
        assert len(list(out.glob("*/*.png"))) == 5
