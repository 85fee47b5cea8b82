"""One user's data on a device (fedpub.data.device_user): each format, exported from a TFF file by
fedpub.data.device_user_writers, reads back bit for bit what the population's reader gives for that user."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedpub.config import parse_config
from fedpub.data.base import DatasetError
from fedpub.data.device_user import load_device_user
from fedpub.data.device_user_writers import export_user
from fedpub.data.emnist_device import write_pixels
from fedpub.data.emnist import EmnistH5
from fedpub.data.stackoverflow import StackOverflowH5
from fedpub.data.stackoverflow_sources import stackoverflow_view
from fedpub.data.stackoverflow_writers import write_stackoverflow_h5, write_tag_count, write_word_count
from fedpub.data.users import load_data
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, write_synthetic_emnist
from tests.data.test_tff_bytes import POSTS, TAGS, WORDS

EMNIST = {"num_writers": 3, "min_examples": 4, "max_examples": 8, "seed": 2}
TRAIN_FILE = "fed_emnist_digitsonly_train.h5"


@pytest.fixture(scope="module")
def emnist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("emnist")
    write_synthetic_emnist(directory, SyntheticEmnistSpec(**EMNIST))
    return directory


def emnist_config(path: Path):
    return parse_config({"data": {"source": "emnist_h5", "path": str(path)}})


def assert_same(a, b) -> None:
    assert a.x.dtype == b.x.dtype and a.y.dtype == b.y.dtype
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)


@pytest.mark.parametrize("fmt", ["folder", "tff"])
def test_an_exported_emnist_user_reads_back_bit_for_bit(emnist_dir: Path, tmp_path: Path, fmt: str) -> None:
    with EmnistH5(emnist_dir / TRAIN_FILE) as population:
        cid = population.client_ids[1]
        expected = population.client_data(cid)
    out = export_user(emnist_dir / TRAIN_FILE, cid, tmp_path / ("user" if fmt == "folder" else "user.h5"),
                      fmt=fmt)
    user = load_device_user(out, emnist_config(emnist_dir), client_id=cid if fmt == "folder" else None)
    assert user.client_id == cid and user.data.client_ids == [cid] and user.data.num_classes == 10
    assert_same(user.data.client_data(cid), expected)
    if fmt == "folder":  # torchvision's ImageFolder convention: <label>/<name>.png, 28x28 grayscale
        images = sorted(out.glob("*/*.png"))
        assert len(images) == len(expected) and Image.open(images[0]).mode == "L"
        assert load_device_user(out, emnist_config(emnist_dir)).client_id == "user"  # default: the folder's name


def test_a_several_user_file_needs_the_client_id_and_names_its_users(emnist_dir: Path) -> None:
    path = emnist_dir / TRAIN_FILE
    with pytest.raises(DatasetError, match=r"holds 3 users \(f0000_00, f0000_01, f0000_02\).*client-id"):
        load_device_user(path, emnist_config(emnist_dir))
    assert load_device_user(path, emnist_config(emnist_dir), client_id="f0000_02").client_id == "f0000_02"
    with pytest.raises(DatasetError, match="does not hold user 'nobody'"):
        load_device_user(path, emnist_config(emnist_dir), client_id="nobody")


def test_a_bad_image_folder_is_refused_naming_the_file(tmp_path: Path, emnist_dir: Path) -> None:
    folder = tmp_path / "user"
    (folder / "3").mkdir(parents=True)
    Image.new("RGB", (28, 28)).save(folder / "3" / "a.png")
    with pytest.raises(DatasetError, match=r"3/a\.png: a RGB image of 28x28 pixels; expected 8-bit grayscale"):
        load_device_user(folder, emnist_config(emnist_dir))
    (folder / "3" / "a.png").unlink()
    (folder / "12").mkdir()
    with pytest.raises(DatasetError, match=r"12: an image folder's subfolders are class indices 0\.\.9"):
        load_device_user(folder, emnist_config(emnist_dir))
    with pytest.raises(DatasetError, match="does not exist"):
        load_device_user(tmp_path / "missing", emnist_config(emnist_dir))


def test_pixels_off_the_8_bit_grid_are_not_written_as_images(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="1/255 grid"):
        write_pixels(tmp_path / "u", np.full((1, 28, 28), 0.5001, dtype=np.float32), np.array([1]))


@pytest.mark.parametrize("fmt", ["folder", "tff"])
@pytest.mark.parametrize("task", ["so_tag", "so_nwp"])
def test_an_exported_stackoverflow_user_reads_back_as_the_task_sees_it(tmp_path: Path, fmt: str, task: str) -> None:
    raw = {
        "task": task, "model": {"name": "so_tag_logreg" if task == "so_tag" else "so_nwp_lstm"},
        "data": {"source": "synthetic_stackoverflow", "path": str(tmp_path / "so"),
                 "synthetic_stackoverflow": {"num_clients": 4, "test_clients": 2, "max_examples": 6}},
    }
    population = load_data(parse_config(raw))
    cid = population.train.client_ids[2]
    source = tmp_path / "so" / "stackoverflow_train.h5"
    out = export_user(source, cid, tmp_path / "device" / ("user" if fmt == "folder" else "user.h5"),
                      fmt=fmt)
    if fmt == "tff":  # the public vocabularies go beside a one-user file
        for name in ("stackoverflow.word_count", "stackoverflow.tag_count"):
            (out.parent / name).write_bytes((tmp_path / "so" / name).read_bytes())
    user = load_device_user(out, parse_config(raw), client_id=cid)
    assert user.client_id == cid and user.data.num_classes == population.train.num_classes
    assert_same(user.data.client_data(cid), population.train.client_data(cid))


@pytest.mark.parametrize("fmt", ["folder", "tff"])
def test_a_user_whose_text_is_not_utf8_exports_and_reads_back_the_same(tmp_path: Path, fmt: str) -> None:
    """TFF reads text as bytes: posts with bytes that are not UTF-8 and a non-breaking space go to posts.jsonl (as
    JSON escapes) or a one-user file and come back as the same bytes, so the device's features are the population's."""
    root = tmp_path / "so"
    source = write_stackoverflow_h5(root / "stackoverflow_train.h5", {"00000001": POSTS})
    write_word_count(root / "stackoverflow.word_count", WORDS)
    write_tag_count(root / "stackoverflow.tag_count", TAGS)
    config = parse_config({"task": "so_tag", "model": {"name": "so_tag_logreg"},
                           "data": {"source": "stackoverflow", "path": str(root)}})
    population = stackoverflow_view(config, StackOverflowH5(source), root)
    out = export_user(source, "00000001", tmp_path / ("user" if fmt == "folder" else "user.h5"), fmt=fmt)
    if fmt == "tff":
        for name in ("stackoverflow.word_count", "stackoverflow.tag_count"):
            (out.parent / name).write_bytes((root / name).read_bytes())
    user = load_device_user(out, config, client_id="00000001")
    assert_same(user.data.client_data("00000001"), population.client_data("00000001"))
    assert population.client_data("00000001").y[0, 0] == 2.0  # python|python, as TFF sums it


def test_a_folder_without_posts_is_refused_naming_what_it_needs(tmp_path: Path) -> None:
    raw = {"task": "so_tag", "model": {"name": "so_tag_logreg"},
           "data": {"source": "stackoverflow", "path": str(tmp_path)}}
    (tmp_path / "user").mkdir()
    with pytest.raises(DatasetError, match="has no posts.jsonl.*stackoverflow.word_count"):
        load_device_user(tmp_path / "user", parse_config(raw))
