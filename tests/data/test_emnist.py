"""EmnistH5 reads TFF's federated EMNIST HDF5 layout exactly, lazily, and names the file in every error."""

from __future__ import annotations

import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from fedpub.data.base import ClientData, DatasetError, FederatedDataset
from fedpub.data.emnist import EmnistH5, load_emnist_split

# Insertion order deliberately unsorted: the reader must sort ids lexicographically, as TFF does.
CLIENTS = {"f0002_01": 3, "f0000_14": 5, "f0001_33": 1}


def _client_arrays(seed: int, n: int, num_classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pixels = np.ones((n, 28, 28), dtype=np.float32)
    pixels[:, 8:20, 10:18] = rng.random((n, 12, 8), dtype=np.float32)
    return rng.integers(0, num_classes, size=n).astype(np.int32), pixels


def write_tff_h5(path: Path, clients: dict[str, int], label_shape_n1: bool = False) -> dict[str, tuple]:
    """A tiny file in the TFF layout (datasets.md §7); returns the arrays written per client."""
    written = {}
    with h5py.File(path, "w") as f:
        examples = f.create_group("examples", track_order=True)
        for seed, (cid, n) in enumerate(clients.items()):
            labels, pixels = _client_arrays(seed, n)
            group = examples.create_group(cid)
            group.create_dataset("label", data=labels[:, None] if label_shape_n1 else labels)
            group.create_dataset("pixels", data=pixels)
            written[cid] = (labels, pixels)
    return written


@pytest.fixture
def tiny_h5(tmp_path: Path) -> tuple[Path, dict[str, tuple]]:
    path = tmp_path / "fed_emnist_digitsonly_train.h5"
    return path, write_tff_h5(path, CLIENTS)


@pytest.mark.parametrize("label_shape_n1", [False, True])
def test_reads_back_exactly(tmp_path: Path, label_shape_n1: bool) -> None:
    path = tmp_path / "fed_emnist_digitsonly_train.h5"
    written = write_tff_h5(path, CLIENTS, label_shape_n1=label_shape_n1)
    with EmnistH5(path) as ds:
        assert isinstance(ds, FederatedDataset)
        assert ds.num_classes == 10
        assert ds.client_ids == sorted(CLIENTS)
        for cid, (labels, pixels) in written.items():
            data = ds.client_data(cid)
            assert isinstance(data, ClientData)
            assert len(data) == ds.num_examples(cid) == CLIENTS[cid]
            assert data.x.dtype == torch.float32 and data.x.shape == (CLIENTS[cid], 1, 28, 28)
            assert data.y.dtype == torch.int64 and data.y.shape == (CLIENTS[cid],)
            np.testing.assert_array_equal(data.x.squeeze(1).numpy(), pixels)  # no inversion
            np.testing.assert_array_equal(data.y.numpy(), labels)


def test_num_classes_from_name_or_argument(tmp_path: Path) -> None:
    write_tff_h5(tmp_path / "fed_emnist_train.h5", CLIENTS)
    with EmnistH5(tmp_path / "fed_emnist_train.h5") as ds:
        assert ds.num_classes == 62
    with EmnistH5(tmp_path / "fed_emnist_train.h5", num_classes=10) as ds:
        assert ds.num_classes == 10
    with pytest.raises(ValueError, match="10 or 62"):
        EmnistH5(tmp_path / "fed_emnist_train.h5", num_classes=7)


def test_num_examples_reads_no_pixels(tiny_h5: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = tiny_h5
    with EmnistH5(path) as ds:

        def no_reads(self: h5py.Dataset, *args: object) -> None:
            raise AssertionError(f"read {self.name}")

        monkeypatch.setattr(h5py.Dataset, "__getitem__", no_reads)
        assert [ds.num_examples(c) for c in ds.client_ids] == [5, 1, 3]
        with pytest.raises(AssertionError, match="read"):
            ds.client_data("f0000_14")


def test_unknown_client_is_key_error(tiny_h5: tuple[Path, dict]) -> None:
    with EmnistH5(tiny_h5[0]) as ds, pytest.raises(KeyError, match="f9999_99"):
        ds.client_data("f9999_99")


def test_pickle_reopens_and_close_is_reusable(tiny_h5: tuple[Path, dict]) -> None:
    path, written = tiny_h5
    ds = EmnistH5(path)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.client_ids == ds.client_ids and clone.num_classes == ds.num_classes
    np.testing.assert_array_equal(clone.client_data("f0002_01").y.numpy(), written["f0002_01"][0])
    ds.close()
    ds.close()
    assert ds.num_examples("f0001_33") == 1  # a closed reader reopens on use
    ds.close()
    clone.close()


def test_load_emnist_split(tmp_path: Path) -> None:
    write_tff_h5(tmp_path / "fed_emnist_digitsonly_train.h5", CLIENTS)
    write_tff_h5(tmp_path / "fed_emnist_digitsonly_test.h5", {cid: 1 for cid in CLIENTS})
    train, test = load_emnist_split(tmp_path, only_digits=True)
    with train, test:
        assert train.client_ids == test.client_ids == sorted(CLIENTS)
        assert train.num_classes == test.num_classes == 10
        assert test.num_examples("f0000_14") == 1
    with pytest.raises(DatasetError, match="fed_emnist_train.h5"):
        load_emnist_split(tmp_path, only_digits=False)


def test_missing_file_says_how_to_get_it(tmp_path: Path) -> None:
    path = tmp_path / "fed_emnist_digitsonly_train.h5"
    with pytest.raises(DatasetError) as err:
        EmnistH5(path)
    message = str(err.value)
    assert str(path) in message
    assert "https://storage.googleapis.com/tff-datasets-public/fed_emnist_digitsonly.tar.bz2" in message
    assert "fedpub run" in message


def test_text_file_is_not_hdf5(tmp_path: Path) -> None:
    path = tmp_path / "fed_emnist_train.h5"
    path.write_text("this is not an HDF5 file\n")
    with pytest.raises(DatasetError, match="not a readable HDF5 file") as err:
        EmnistH5(path)
    assert str(path) in str(err.value)


def test_truncated_file(tiny_h5: tuple[Path, dict]) -> None:
    path, _ = tiny_h5
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])
    with pytest.raises(DatasetError, match="corrupt or truncated") as err:
        EmnistH5(path)
    assert str(path) in str(err.value)


def test_no_examples_group(tmp_path: Path) -> None:
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f.create_group("something_else")
    with pytest.raises(DatasetError, match="no 'examples' group") as err:
        EmnistH5(path)
    assert str(path) in str(err.value)


def _edit_client(path: Path, edit: str) -> None:
    with h5py.File(path, "a") as f:
        group = f["examples/f0000_14"]
        if edit in ("label", "pixels"):
            del group[edit]
        elif edit == "pixel_shape":
            del group["pixels"]
            group.create_dataset("pixels", data=np.ones((5, 784), dtype=np.float32))
        elif edit == "lengths":
            del group["label"]
            group.create_dataset("label", data=np.zeros(4, dtype=np.int32))
        elif edit == "label_dtype":
            del group["label"]
            group.create_dataset("label", data=np.zeros(5, dtype=np.float32))
        elif edit == "label_range":
            group["label"][0] = 10
        elif edit == "pixel_range":
            group["pixels"][0, 0, 0] = 255.0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("label", "no 'label' dataset"),
        ("pixels", "no 'pixels' dataset"),
        ("pixel_shape", r"pixels of shape \(5, 784\)"),
        ("lengths", "4 labels but 5 pixel arrays"),
        ("label_dtype", "labels of dtype float32"),
        ("label_range", r"outside \[0, 9\]"),
        ("pixel_range", r"outside \[0, 1\]"),
    ],
)
def test_malformed_client(tiny_h5: tuple[Path, dict], edit: str, message: str) -> None:
    path, _ = tiny_h5
    _edit_client(path, edit)
    with EmnistH5(path) as ds:
        assert ds.num_examples("f0002_01") == 3  # other clients stay readable
        with pytest.raises(DatasetError, match=message) as err:
            ds.client_data("f0000_14")
    assert str(path) in str(err.value) and "f0000_14" in str(err.value)
