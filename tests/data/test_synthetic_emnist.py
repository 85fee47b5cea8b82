"""The synthetic quick-start data: TFF layout, deterministic, atomic, cached by spec, non-IID, TFF polarity."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from fedpub.data.base import DatasetError
from fedpub.data.emnist import EmnistH5, load_emnist_split
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, ensure_synthetic_emnist
from fedpub.data import synthetic_emnist
from fedpub.data.synthetic_emnist import TEST_NAME, TRAIN_NAME, write_synthetic_emnist, writer_ids

SPEC = SyntheticEmnistSpec(num_writers=20, min_examples=8, max_examples=30, seed=3)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_synthetic_emnist(tmp_path_factory.mktemp("synthetic"), SPEC)


def _all_pixels(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    with h5py.File(path, "r") as f:
        return {cid: (g["label"][()], g["pixels"][()]) for cid, g in f["examples"].items()}


def test_tff_layout_and_split(generated: tuple[Path, Path]) -> None:
    train_path, test_path = generated
    assert (train_path.name, test_path.name) == (TRAIN_NAME, TEST_NAME)
    train, test = load_emnist_split(train_path.parent, only_digits=True)
    with train, test:
        assert train.client_ids == test.client_ids == writer_ids(SPEC.num_writers)
        assert all(len(c) == 8 and c[0] == "f" and c[5] == "_" for c in train.client_ids)
        assert train.client_ids == sorted(train.client_ids)
        total_train = total_test = 0
        for cid in train.client_ids:
            n_train, n_test = train.num_examples(cid), test.num_examples(cid)
            assert SPEC.min_examples <= n_train + n_test <= SPEC.max_examples
            assert n_test >= 1 and n_train >= 1
            total_train, total_test = total_train + n_train, total_test + n_test
            data = train.client_data(cid)
            assert data.x.shape == (n_train, 1, 28, 28)
            assert int(data.y.min()) >= 0 and int(data.y.max()) <= 9
        assert 0.1 < total_test / (total_train + total_test) < 0.2
    with h5py.File(train_path, "r") as f:
        assert json.loads(f.attrs["fedpub_spec"])["seed"] == SPEC.seed
        assert f["examples/f0000_00/label"].dtype == np.int32
        assert f["examples/f0000_00/pixels"].dtype == np.float32


def test_pixel_range_and_polarity(generated: tuple[Path, Path]) -> None:
    with EmnistH5(generated[0]) as ds:
        x = np.concatenate([ds.client_data(c).x.numpy() for c in ds.client_ids])
    assert x.dtype == np.float32 and x.min() >= 0.0 and x.max() <= 1.0
    border = np.concatenate([x[..., :2, :].ravel(), x[..., -2:, :].ravel()])
    assert np.median(border) == 1.0  # background is white (1.0)
    assert (x.reshape(len(x), -1).min(axis=1) < 0.4).all()  # every image has dark ink
    assert (x < 0.5).mean() < 0.35  # ink is the minority


def test_same_spec_same_bytes(generated: tuple[Path, Path], tmp_path: Path) -> None:
    again = write_synthetic_emnist(tmp_path, SPEC)
    for first, second in zip(generated, again):
        a, b = _all_pixels(first), _all_pixels(second)
        assert a.keys() == b.keys()
        for cid in a:
            assert a[cid][0].tobytes() == b[cid][0].tobytes()
            assert a[cid][1].tobytes() == b[cid][1].tobytes()


def test_rendering_threads_do_not_change_a_pixel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks render on several threads (fedpub.data.synthetic_emnist.RENDER_THREADS): one thread writes the same
    bytes."""
    monkeypatch.setattr(synthetic_emnist, "RENDER_CHUNK", 4)  # many chunks, so that threads share the work
    threaded = {}
    for threads in (1, 3):
        monkeypatch.setattr(synthetic_emnist, "RENDER_THREADS", threads)
        threaded[threads] = _all_pixels(write_synthetic_emnist(tmp_path / str(threads), SPEC)[0])
    assert threaded[1].keys() == threaded[3].keys()
    assert all(threaded[1][c][1].tobytes() == threaded[3][c][1].tobytes() for c in threaded[1])


def test_other_seed_other_data(generated: tuple[Path, Path], tmp_path: Path) -> None:
    other = write_synthetic_emnist(tmp_path, dataclasses.replace(SPEC, seed=4))
    assert _all_pixels(generated[0])["f0000_00"][1].tobytes() != _all_pixels(other[0])["f0000_00"][1].tobytes()


def test_non_iid_class_histograms(generated: tuple[Path, Path]) -> None:
    hist = []
    for path in generated:
        with EmnistH5(path) as ds:
            ys = [ds.client_data(c).y.numpy() for c in ds.client_ids]
            hist.append(np.stack([np.bincount(y, minlength=10) for y in ys]))
    counts = hist[0] + hist[1]
    share = counts / counts.sum(axis=1, keepdims=True)
    assert (counts.sum(axis=0) > 0).all()  # every digit occurs
    assert np.abs(share - share.mean(axis=0)).sum(axis=1).mean() > 0.3  # far from a common class mix
    assert len({tuple(row) for row in counts}) == len(counts)


def test_interrupted_generation_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = synthetic_emnist.write_clients
    calls = []

    def fail_on_second(path: Path, spec: SyntheticEmnistSpec, clients: list) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise RuntimeError("interrupted")
        real_write(path, spec, clients)

    monkeypatch.setattr(synthetic_emnist, "write_clients", fail_on_second)
    with pytest.raises(RuntimeError, match="interrupted"):
        write_synthetic_emnist(tmp_path, SyntheticEmnistSpec(num_writers=3, min_examples=4, max_examples=6))
    assert len(calls) == 2 and all(p.parent == tmp_path for p in calls)
    assert list(tmp_path.iterdir()) == []  # neither final files nor temporaries


def test_ensure_reuses_the_same_spec_and_never_replaces_data_of_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SyntheticEmnistSpec(num_writers=4, min_examples=4, max_examples=6)
    paths = ensure_synthetic_emnist(tmp_path, spec)
    stamps = [p.stat().st_mtime_ns for p in paths]

    def no_write(*args: object) -> None:
        raise AssertionError("regenerated")

    with monkeypatch.context() as patch:
        patch.setattr(synthetic_emnist, "write_synthetic_emnist", no_write)
        assert ensure_synthetic_emnist(tmp_path, spec) == paths
        # another spec (a second config sharing data.path while a run reads it) is refused, the field named
        other = SyntheticEmnistSpec(num_writers=5, min_examples=4, max_examples=6)
        with pytest.raises(DatasetError, match=r"another spec \(num_writers: 4 → 5\); set data.path to another"):
            ensure_synthetic_emnist(tmp_path, other)
        # a file fedpub did not write (a real download, anything) is never overwritten
        paths[1].write_bytes(b"not fedpub's")
        with pytest.raises(DatasetError, match="files that fedpub did not generate"):
            ensure_synthetic_emnist(tmp_path, spec)
    assert paths[0].stat().st_mtime_ns == stamps[0] and paths[1].read_bytes() == b"not fedpub's"

    fresh = tmp_path / "fresh"  # a missing file is generated
    ensure_synthetic_emnist(fresh, other)
    with EmnistH5(fresh / paths[0].name) as ds:
        assert len(ds.client_ids) == 5


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_writers", 0), ("min_examples", 1), ("max_examples", 3), ("test_fraction", 1.0),
     ("class_concentration", 0.0), ("ambiguous_fraction", 1.5), ("pixel_noise", -0.1), ("noisy_fraction", 2.0)],
)
def test_spec_validation_names_the_field(field: str, value: float) -> None:
    kwargs = {"min_examples": 4, "max_examples": 6, field: value}
    with pytest.raises(ValueError, match=field):
        SyntheticEmnistSpec(**kwargs)
