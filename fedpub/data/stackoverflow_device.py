"""Federated StackOverflow's formats for one user's data on a device (:mod:`fedpub.data.device_user`): a one-user
``stackoverflow_*.h5`` file (``/examples/<id>/{tokens,title,tags,...}``), or a StackOverflow-like folder,
``<folder>/posts.jsonl``, one JSON object per sentence with TFF's field names (``tokens``, ``title``, ``tags`` as
``|``-separated tags, ``type``, ``creation_date``, ``score``). Either needs the public vocabularies
``stackoverflow.word_count`` and ``stackoverflow.tag_count`` beside it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fedpub.config import ExperimentConfig
from fedpub.data.base import DatasetError, FederatedDataset
from fedpub.data.device_user import DeviceFormats, DeviceUser, ExportFormat, pick_user
from fedpub.data.stackoverflow import (
    FIELDS,
    TAG_COUNT_FILE,
    WORD_COUNT_FILE,
    Columns,
    StackOverflowH5,
    columns_to_examples,
)
from fedpub.data.stackoverflow_sources import stackoverflow_view
from fedpub.data.stackoverflow_writers import write_stackoverflow_h5

POSTS_FILE = "posts.jsonl"
"""A StackOverflow-like folder's posts, one JSON object per sentence."""


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


def read_file(path: Path, config: ExperimentConfig, client_id: str | None) -> DeviceUser:
    reader = StackOverflowH5(path)
    cid = pick_user(reader.client_ids, client_id, path)
    return DeviceUser(cid, stackoverflow_view(config, reader, path.parent, client_ids=[cid]))


def read_folder(folder: Path, config: ExperimentConfig, client_id: str) -> FederatedDataset:
    if not (folder / POSTS_FILE).is_file():
        raise DatasetError(
            f"{folder} has no {POSTS_FILE}: a StackOverflow-like folder holds {POSTS_FILE} (one JSON sentence a "
            f"line) and the public {WORD_COUNT_FILE} and {TAG_COUNT_FILE}"
        )
    return stackoverflow_view(config, PostsFolder(folder, client_id), folder)


def export(source: Path, client_id: str, out: Path, fmt: ExportFormat) -> Path:
    """The user's posts (``posts.jsonl`` with the count files copied from beside ``source``), or a one-user HDF5
    file (its count files must then be put beside it)."""
    with StackOverflowH5(source) as reader:
        examples = columns_to_examples(reader.columns(client_id, FIELDS))
    if fmt == "tff":
        return write_stackoverflow_h5(out, {client_id: examples})
    out.mkdir(parents=True, exist_ok=True)
    with (out / POSTS_FILE).open("w", encoding="utf-8") as posts:
        for example in examples:
            posts.write(json.dumps(example) + "\n")
    for name in (WORD_COUNT_FILE, TAG_COUNT_FILE):
        if not (source.parent / name).is_file():
            raise DatasetError(f"{source.parent / name} is missing: a device needs the public vocabularies")
        shutil.copyfile(source.parent / name, out / name)
    return out


DEVICE = DeviceFormats(read_file=read_file, read_folder=read_folder, export=export)
