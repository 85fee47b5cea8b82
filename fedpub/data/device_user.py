"""One user's own data on a device (a Flower SuperNode's ``data-path``), read into the same :class:`ClientData`
the population's readers give, with the same preprocessing (docs/deployment.md, "Data on a device").

Formats, detected from the path:

- **a file in TFF's HDF5 layout** for the config's source (``fed_emnist*.h5``: ``/examples/<id>/{label,pixels}``;
  StackOverflow: ``/examples/<id>/{tokens,title,tags,...}``) holding one user; a file of several users needs the
  node's ``client-id`` to pick one.
- **an EMNIST-like folder** of images, torchvision's ``ImageFolder`` convention: ``<folder>/<label>/<name>.png``,
  28×28 8-bit grayscale, ``<label>`` the class index; a pixel value v is read as v / 255 in float32 (TFF's
  pixels: [0, 1], background 1.0, on a 1/255 grid). The examples are in the order of the file names (then
  labels), so ``00000.png``, ``00001.png``, ... keep an exported user's order.
- **a StackOverflow-like folder**: ``<folder>/posts.jsonl``, one JSON object per sentence with TFF's field names
  (``tokens``, ``title``, ``tags`` as ``|``-separated tags, ``type``, ``creation_date``, ``score``), and the
  public vocabularies ``stackoverflow.word_count`` and ``stackoverflow.tag_count`` beside it.

For StackOverflow a one-user HDF5 file also needs the two count files beside it. A folder's user id is the node's
``client-id``, else the folder's name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedpub.config import ExperimentConfig
from fedpub.data.base import ClientData, DatasetError, FederatedDataset
from fedpub.data.emnist import IMAGE_SHAPE, EmnistH5, checked_client_data
from fedpub.data.registry import stackoverflow_view
from fedpub.data.stackoverflow import FIELDS, TAG_COUNT_FILE, WORD_COUNT_FILE, Columns, StackOverflowH5

POSTS_FILE = "posts.jsonl"
"""A StackOverflow-like folder's posts, one JSON object per sentence."""
IMAGE_SUFFIX = ".png"


@dataclass(frozen=True)
class DeviceUser:
    """The user a device holds: its id and a one-user dataset (``client_ids == [client_id]``) of the task's
    view, so the model's class count and the preprocessing are those of the population's readers."""

    client_id: str
    data: FederatedDataset


class OneUser:
    """A :class:`FederatedDataset` of one user whose examples are already decoded."""

    def __init__(self, client_id: str, data: ClientData, num_classes: int) -> None:
        self.client_ids = [client_id]
        self.num_classes = num_classes
        self._data = data

    def client_data(self, client_id: str) -> ClientData:
        if client_id != self.client_ids[0]:
            raise KeyError(f"this device holds user {self.client_ids[0]!r}, not {client_id!r}")
        return self._data

    def num_examples(self, client_id: str) -> int:
        return len(self.client_data(client_id))


class PostsFolder:
    """A StackOverflow-like folder's ``posts.jsonl`` as a one-user StackOverflow reader (the task views'
    :class:`~fedpub.data.stackoverflow.StackOverflowReader`)."""

    def __init__(self, folder: Path, client_id: str) -> None:
        self.path = folder / POSTS_FILE
        self.client_ids = [client_id]
        self._columns: Columns = {name: [] for name in FIELDS}
        with self.path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    post = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{self.path}, line {number}: not JSON: {exc}") from None
                if not isinstance(post, dict) or not isinstance(post.get("tokens"), str):
                    raise DatasetError(
                        f"{self.path}, line {number}: expected an object with a string `tokens` (and `title`, "
                        f"`tags`, ...: {', '.join(FIELDS)})"
                    )
                for name in FIELDS:
                    value = post.get(name, 0 if name == "score" else "")
                    if not isinstance(value, int if name == "score" else str):
                        raise DatasetError(f"{self.path}, line {number}: `{name}` is {value!r}")
                    self._columns[name].append(value)

    def num_examples(self, client_id: str) -> int:
        return len(self._columns["tokens"])

    def columns(self, client_id: str, fields: tuple[str, ...] | list[str] = FIELDS) -> Columns:
        if client_id != self.client_ids[0]:
            raise KeyError(f"{self.path} holds user {self.client_ids[0]!r}, not {client_id!r}")
        return {name: list(self._columns[name]) for name in fields}


def read_image_folder(folder: Path, num_classes: int) -> ClientData:
    """An EMNIST-like folder ``<folder>/<label>/<name>.png`` as ClientData (x float32 ``(N, 1, 28, 28)`` = v / 255,
    y int64), the examples in the order of the images' file names (then labels)."""
    from PIL import Image  # Pillow: only a device reading images needs it

    for label_dir in (p for p in folder.iterdir() if p.is_dir()):
        if not label_dir.name.isdigit() or int(label_dir.name) >= num_classes:
            raise DatasetError(
                f"{label_dir}: an image folder's subfolders are class indices 0..{num_classes - 1} "
                f"(<folder>/<label>/<name>{IMAGE_SUFFIX})"
            )
    labels, images = [], []
    for path in sorted(folder.glob(f"*/*{IMAGE_SUFFIX}"), key=lambda p: (p.name, int(p.parent.name))):
        with Image.open(path) as image:
            if image.mode != "L" or image.size != IMAGE_SHAPE:
                raise DatasetError(
                    f"{path}: a {image.mode} image of {image.size[0]}x{image.size[1]} pixels; expected 8-bit "
                    "grayscale (mode L), 28x28"
                )
            images.append(np.asarray(image, dtype=np.uint8))
        labels.append(int(path.parent.name))
    if not images:
        raise DatasetError(f"{folder} has no <label>/<name>{IMAGE_SUFFIX} images")
    x = np.stack(images).astype(np.float32) / np.float32(255.0)
    return checked_client_data(x, np.asarray(labels, dtype=np.int64), num_classes, str(folder))


def _pick_user(client_ids: list[str], wanted: str | None, path: Path) -> str:
    if wanted is not None:
        if wanted not in client_ids:
            raise DatasetError(f"{path} does not hold user {wanted!r} (it holds {', '.join(client_ids[:10])})")
        return wanted
    if len(client_ids) != 1:
        raise DatasetError(
            f"{path} holds {len(client_ids)} users ({', '.join(client_ids[:10])}): name this device's user with "
            "the node config's `client-id`"
        )
    return client_ids[0]


def load_device_user(path: str | Path, config: ExperimentConfig, client_id: str | None = None) -> DeviceUser:
    """The user at ``path`` (a format of this module's docstring) as the task of ``config`` sees it;
    ``client_id`` picks a user of a several-user file and names a folder's user (default: the folder's name)."""
    path = Path(path)
    stackoverflow = config.task.startswith("so_")
    if path.is_file():
        if stackoverflow:
            reader = StackOverflowH5(path)
            cid = _pick_user(reader.client_ids, client_id, path)
            return DeviceUser(cid, stackoverflow_view(config, reader, path.parent, client_ids=[cid]))
        emnist = EmnistH5(path, num_classes=10 if config.data.only_digits else 62)
        cid = _pick_user(emnist.client_ids, client_id, path)
        return DeviceUser(cid, OneUser(cid, emnist.client_data(cid), emnist.num_classes))
    if not path.is_dir():
        raise DatasetError(f"the device's data-path {path} does not exist")
    cid = client_id if client_id is not None else path.name
    if stackoverflow:
        if not (path / POSTS_FILE).is_file():
            raise DatasetError(
                f"{path} has no {POSTS_FILE}: a StackOverflow-like folder holds {POSTS_FILE} (one JSON sentence a "
                f"line) and the public {WORD_COUNT_FILE} and {TAG_COUNT_FILE}"
            )
        return DeviceUser(cid, stackoverflow_view(config, PostsFolder(path, cid), path))
    num_classes = 10 if config.data.only_digits else 62
    return DeviceUser(cid, OneUser(cid, read_image_folder(path, num_classes), num_classes))
