"""Lazy readers for TFF's federated StackOverflow files, and its two vocabulary files.

Layouts as TFF defines them (google-parfait/tensorflow-federated, ``tensorflow_federated/python/simulation/datasets/
stackoverflow.py`` and ``sql_client_data.py``; the HDF5 layout from the loader before commit 7bb20162f); see
``shared/reference/datasets.md`` §2.1-2.3:

- HDF5 (legacy): ``stackoverflow_{train,held_out,test}.h5``, ``/examples/<client_id>/`` holding six parallel 1-D
  datasets ``creation_date``, ``score`` (int64), ``tags``, ``title``, ``tokens``, ``type``; strings are read as
  bytes (vlen ASCII or fixed-length), ``np.bytes_`` or ``str``: all are accepted.
- SQLite (current): ``stackoverflow.sqlite`` (published as ``.sqlite.lzma``), tables ``examples`` and
  ``client_metadata``, splits ``train``, ``heldout``, ``test``; each row a ``tf.train.Example`` with one BytesList
  value per string field and one Int64List value for ``score`` (TFF ``stackoverflow._add_proto_parsing``).
- ``stackoverflow.word_count``: ``word count`` lines in descending count order, parsed with ``line.split()``;
  ``stackoverflow.tag_count``: one JSON object ``{tag: count}``, sorted by TFF by count, descending (stable).

Both readers give the same view: ``client_ids`` (sorted lexicographically, as TFF sorts them), ``num_examples``
(metadata only), ``columns`` (field -> one value per example) and ``examples`` (one dict per example), ``score``
as ``int`` and the strings as ``str`` that keep the stored bytes exactly (:func:`decode_text`). TFF never decodes
them: ``parse_example`` (SQLite) and h5py (HDF5) give ``tf.string`` bytes, and the preprocessing splits and looks up
bytes. So text that is not valid UTF-8 is read, not refused: its invalid bytes become lone surrogates that
:func:`encode_text` turns back into the same bytes. The task views (features and targets) are in
:mod:`fedpub.data.stackoverflow_tasks`.
"""

from __future__ import annotations

import bisect
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypedDict, TypeVar, cast

import h5py
import numpy as np

from fedpub.data.base import DatasetError, TffH5, h5_errors, require_listed
from fedpub.data.remote_files import TFF_BASE
from fedpub.data.tff_sqlite import SqliteSplitConnection, add_client_index, decode_row, resolve_sqlite_path

FIELDS: tuple[str, ...] = ("creation_date", "score", "tags", "title", "tokens", "type")
"""The six fields of every example, in TFF's (sorted) order; ``score`` is an integer, the others strings."""
SPLITS: tuple[str, ...] = ("train", "heldout", "test")
"""Split names as the SQLite database spells them."""
H5_FILES: dict[str, str] = {
    "train": "stackoverflow_train.h5",
    "heldout": "stackoverflow_held_out.h5",
    "test": "stackoverflow_test.h5",
}
"""Split name -> HDF5 file name (note ``held_out`` in the file name)."""
SQLITE_FILE = "stackoverflow.sqlite"
WORD_COUNT_FILE = "stackoverflow.word_count"
TAG_COUNT_FILE = "stackoverflow.tag_count"

Columns = dict[str, list[Any]]
"""``{field: [value per example]}``: ``list[str]`` for the text fields, ``list[int]`` for ``score``."""


class StackOverflowExample(TypedDict):
    """One sentence of a post, with the post's metadata (answers carry their question's title and tags)."""

    creation_date: str
    score: int
    tags: str
    title: str
    tokens: str
    type: str


class StackOverflowReader(Protocol):
    """What the task views need from a reader (both :class:`StackOverflowH5` and :class:`StackOverflowSqlite`)."""

    path: Path
    client_ids: list[str]

    def num_examples(self, client_id: str) -> int: ...

    def columns(self, client_id: str, fields: Sequence[str] = FIELDS) -> Columns: ...


def _hint(name: str) -> str:
    return f"download {TFF_BASE}/{name} (`fedpub data download {name}`)"


def _check_fields(fields: Sequence[str]) -> None:
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        raise ValueError(f"unknown StackOverflow field(s) {unknown}; the fields are {', '.join(FIELDS)}")


def decode_text(raw: bytes) -> str:
    """A stored string as ``str``, losslessly: TFF hands its models the raw bytes (``tf.string``), so they are
    decoded as UTF-8 with every byte that is not part of valid UTF-8 kept as a lone surrogate U+DC80..U+DCFF
    (Python's ``surrogateescape``); :func:`encode_text` gives back exactly the stored bytes. ASCII (all of TFF's
    preprocessed text) decodes as itself."""
    return raw.decode("utf-8", "surrogateescape")


def encode_text(text: str) -> bytes:
    """The bytes a string read by :func:`decode_text` was stored as (what TFF's ``tf.string`` holds); raises
    UnicodeEncodeError for a surrogate :func:`decode_text` cannot produce."""
    return text.encode("utf-8", "surrogateescape")


def columns_to_examples(columns: Columns) -> list[StackOverflowExample]:
    """Turn ``{field: values}`` (all six fields) into one :class:`StackOverflowExample` per example."""
    rows = zip(*(columns[f] for f in FIELDS))
    return [cast(StackOverflowExample, dict(zip(FIELDS, row))) for row in rows]


def decode_stackoverflow_example(blob: object, where: str, fields: Sequence[str] = FIELDS) -> list[Any]:
    """The ``fields`` of one serialised ``tf.train.Example`` (a row of the SQLite database), in order: ``score`` as
    an int, the others as str. Raises :class:`DatasetError` naming ``where`` when it is not such an example."""
    features = decode_row(blob, where)
    out = []
    for name in fields:
        values = features.get(name)
        if values is None:
            raise DatasetError(
                f"{where} has no '{name}' feature (it has {', '.join(sorted(features)) or 'none'}; "
                f"a StackOverflow example has {', '.join(FIELDS)})"
            )
        value = values[0] if len(values) == 1 else None
        if name == "score" and isinstance(value, int):
            out.append(value)
        elif name != "score" and isinstance(value, bytes):
            out.append(decode_text(value))
        else:
            expected = "int64" if name == "score" else "bytes"
            raise DatasetError(f"{where}: feature '{name}' is {values[:3]!r}, expected one {expected} value")
    return out


_R = TypeVar("_R", bound="_Reader")


class _Reader(ABC):
    """Shared behaviour of the two readers: ``examples`` from ``columns``, context management."""

    path: Path
    client_ids: list[str]

    @abstractmethod
    def columns(self, client_id: str, fields: Sequence[str] = FIELDS) -> Columns:
        """The requested fields of one client, one value per example in stored order."""

    def examples(self, client_id: str) -> list[StackOverflowExample]:
        """Every example of ``client_id``, in stored order, strings decoded to ``str`` and ``score`` to ``int``."""
        return columns_to_examples(self.columns(client_id))

    @abstractmethod
    def close(self) -> None:
        """Release the file handle (a later read reopens it)."""

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class StackOverflowH5(TffH5, _Reader):
    """One TFF StackOverflow HDF5 file (``stackoverflow_{train,held_out,test}.h5``), read lazily per client
    (:class:`TffH5`: opening it lists the client ids, the handle is per process and dropped when pickled).

    ``num_examples`` reads dataset shapes; ``columns`` reads the requested datasets of one client.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(
            path,
            dataset="StackOverflow",
            missing=f"{_hint('stackoverflow.tar.bz2')} and extract it into {Path(path).parent}",
        )

    def _datasets(self, client_id: str, fields: Sequence[str]) -> dict[str, h5py.h5d.DatasetID]:
        """The client's datasets for ``fields``, checked from metadata only (1-D, equal lengths, dtypes).

        h5py's low-level API: about three times faster per client than ``group[name]``, which matters for cohorts
        of small clients."""
        require_listed(self.client_ids, client_id, str(self.path))
        where = f"{self.path}: client {client_id!r}"
        with h5_errors(where):
            try:
                group = h5py.h5g.open(self._examples().id, client_id.encode())
            except (KeyError, ValueError):
                raise DatasetError(f"{where} is not a group (a StackOverflow client is a group of datasets)") from None
            found: dict[str, h5py.h5d.DatasetID] = {}
            for name in fields:
                if name.encode() not in group:
                    raise DatasetError(
                        f"{where} has no '{name}' dataset (a StackOverflow client has {', '.join(FIELDS)})"
                    )
                try:
                    dataset = h5py.h5d.open(group, name.encode())
                except (KeyError, ValueError):
                    raise DatasetError(f"{where}: '{name}' is not a dataset") from None
                if len(dataset.shape) != 1:
                    raise DatasetError(f"{where}: '{name}' has shape {dataset.shape}, expected (N,)")
                if name == "score":
                    if not np.issubdtype(dataset.dtype, np.integer):
                        raise DatasetError(f"{where}: 'score' has dtype {dataset.dtype}, expected integers")
                elif h5py.check_string_dtype(dataset.dtype) is None:
                    raise DatasetError(f"{where}: '{name}' has dtype {dataset.dtype}, expected strings")
                found[name] = dataset
        lengths = {name: dataset.shape[0] for name, dataset in found.items()}
        if len(set(lengths.values())) > 1:
            raise DatasetError(f"{where} has datasets of different lengths {lengths} (they must be parallel)")
        return found

    def num_examples(self, client_id: str) -> int:
        """Number of examples of ``client_id``, from the shape of its ``tokens`` dataset (no example is read; the
        other datasets are checked when they are read)."""
        return int(self._datasets(client_id, ("tokens",))["tokens"].shape[0])

    def columns(self, client_id: str, fields: Sequence[str] = FIELDS) -> Columns:
        """The requested fields of one client, one value per example in stored order."""
        _check_fields(fields)
        out: Columns = {}
        for name, dataset in self._datasets(client_id, fields).items():
            with h5_errors(f"{self.path}: client {client_id!r}"):
                values = np.empty(dataset.shape, dtype=dataset.dtype)
                if values.size:
                    dataset.read(h5py.h5s.ALL, h5py.h5s.ALL, values)
            out[name] = values.tolist() if name == "score" else [decode_text(v) for v in values.tolist()]
        return out

    def __repr__(self) -> str:
        return f"StackOverflowH5({str(self.path)!r}, clients={len(self.client_ids)})"


class StackOverflowSqlite(_Reader):
    """One split (``train``, ``heldout`` or ``test``) of TFF's ``stackoverflow.sqlite``, read lazily per client.

    ``path`` may be the ``.sqlite`` file, the published ``.sqlite.lzma``, which is decompressed once (streamed,
    atomically) to ``cache_dir`` (default: beside it) and reused afterwards, or a folder holding either
    (:func:`~fedpub.data.tff_sqlite.find_sqlite`). Client ids and example counts come
    from ``client_metadata`` when the object is made (kept as a sorted list and an array: no per-client dict);
    ``columns`` reads one client's rows in insertion (rowid) order and decodes their ``tf.train.Example``s. A
    database whose ``examples`` table has no index on the client id, as TFF writes them, is read correctly but
    every client read scans the whole table (about 20 s per client for TFF's 169 million rows, with the file in
    memory): a warning says so, and :func:`add_client_index` adds the index; the copy decompressed from a
    ``.sqlite.lzma`` gets it before it is put in place. Pickling keeps the path, split and metadata.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        split: str,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        given = Path(path)
        if split not in SPLITS:
            raise DatasetError(
                f"unknown StackOverflow split {split!r} for {given}: allowed splits are {', '.join(SPLITS)}"
            )
        self.path = resolve_sqlite_path(
            given, cache_dir, dataset="StackOverflow", name=SQLITE_FILE, hint=_hint("stackoverflow.sqlite.lzma")
        )
        self.split = split
        self._db = SqliteSplitConnection(self.path, split)
        self.client_ids, self._counts = self._read_metadata()
        self._db.warn_without_client_index()

    def _read_metadata(self) -> tuple[list[str], np.ndarray]:
        rows = self._db.query("SELECT client_id, num_examples FROM client_metadata WHERE split_name = ?", (self.split,))
        if not rows:
            present = [r[0] for r in self._db.query("SELECT DISTINCT split_name FROM client_metadata", ())]
            raise DatasetError(
                f"{self.path} has no clients in split {self.split!r} "
                f"(splits present: {', '.join(sorted(map(str, present))) or 'none'})"
            )
        for client_id, num in rows:
            if not isinstance(client_id, str) or not isinstance(num, int) or num < 0:
                raise DatasetError(
                    f"{self.path}: client_metadata row ({client_id!r}, {num!r}) of split {self.split!r} "
                    "is not (text client id, non-negative integer count)"
                )
        rows.sort()
        ids: list[str] = []
        counts: list[int] = []
        for client_id, num in rows:
            if ids and ids[-1] == client_id:
                if counts[-1] != num:
                    raise DatasetError(
                        f"{self.path}: client {client_id!r} of split {self.split!r} has conflicting counts "
                        f"{counts[-1]} and {num} in client_metadata"
                    )
                continue
            ids.append(client_id)
            counts.append(num)
        return ids, np.asarray(counts, dtype=np.int64)

    def num_examples(self, client_id: str) -> int:
        """Number of examples of ``client_id``, from ``client_metadata`` (no example is read)."""
        i = bisect.bisect_left(self.client_ids, client_id)
        if i == len(self.client_ids) or self.client_ids[i] != client_id:
            raise KeyError(f"client {client_id!r} is not in split {self.split!r} of {self.path}")
        return int(self._counts[i])

    def columns(self, client_id: str, fields: Sequence[str] = FIELDS) -> Columns:
        """The requested fields of one client, one value per example in insertion order."""
        _check_fields(fields)
        expected = self.num_examples(client_id)
        rows = self._db.query(
            "SELECT serialized_example_proto FROM examples WHERE client_id = ? AND split_name = ? ORDER BY rowid",
            (client_id, self.split),
        )
        if len(rows) != expected:
            where = self._db.where(client_id)
            raise DatasetError(f"{where} has {len(rows)} examples but client_metadata says {expected}")
        return self.decode_rows(client_id, [blob for blob, in rows], fields)

    def decode_rows(self, client_id: str, blobs: Sequence[object], fields: Sequence[str] = FIELDS) -> Columns:
        """The ``fields`` of ``client_id``'s examples from its ``serialized_example_proto`` cells, in order, checked
        as :meth:`columns` checks them (``fedpub data verify`` decodes a whole file this way, in one scan)."""
        where = self._db.where(client_id)
        decoded = [decode_stackoverflow_example(blob, f"{where}, example {i}", fields) for i, blob in enumerate(blobs)]
        return {name: [row[j] for row in decoded] for j, name in enumerate(fields)}

    def close(self) -> None:
        """Close the connection (a later read reopens it)."""
        self._db.close()

    def __repr__(self) -> str:
        return f"StackOverflowSqlite({str(self.path)!r}, {self.split!r}, clients={len(self.client_ids)})"


def open_stackoverflow(
    directory: str | os.PathLike[str], split: str, *, cache_dir: str | os.PathLike[str] | None = None
) -> StackOverflowH5 | StackOverflowSqlite:
    """Open ``split`` from ``directory``: ``stackoverflow_<split>.h5`` if present, else ``stackoverflow.sqlite``,
    else ``stackoverflow.sqlite.lzma`` (decompressed once into ``cache_dir``, default ``directory``); a
    ``stackoverflow.sqlite`` older than the ``.lzma`` beside it is refused
    (:func:`~fedpub.data.tff_sqlite.find_sqlite`)."""
    if split not in SPLITS:
        raise DatasetError(f"unknown StackOverflow split {split!r}: allowed splits are {', '.join(SPLITS)}")
    root = Path(directory)
    h5 = root / H5_FILES[split]
    if h5.is_file():
        return StackOverflowH5(h5)
    if any((root / name).is_file() for name in (SQLITE_FILE, SQLITE_FILE + ".lzma")):
        return StackOverflowSqlite(root, split, cache_dir=cache_dir)
    raise DatasetError(
        f"{root} holds neither {H5_FILES[split]} nor {SQLITE_FILE}[.lzma]: {_hint('stackoverflow.tar.bz2')} "
        f"or {_hint('stackoverflow.sqlite.lzma')}"
    )


def _check_vocab_size(vocab_size: int | None) -> None:
    if vocab_size is not None and vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1 or None, got {vocab_size}")


def read_word_counts(path: str | os.PathLike[str]) -> Iterator[tuple[int, str, int]]:
    """``stackoverflow.word_count`` as (line number, word, count), one line at a time in file order (a 6-million-line
    file is never held whole). Each line is ``word count`` split with ``line.split()``, Python's split on any
    Unicode whitespace, as TFF's ``load_word_counts`` splits it (the text is split as bytes only by the tasks);
    raises :class:`DatasetError` on a missing file or a line that is not ``word count``."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(
            f"word count file {path} does not exist: {_hint('stackoverflow.word_count.tar.bz2')} and extract it"
        )
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                parts = line.split()
                if len(parts) != 2 or not (parts[1].isascii() and parts[1].isdigit()):
                    raise DatasetError(f"{path}, line {number}: expected 'word count', got {line.rstrip()!r}")
                yield number, parts[0], int(parts[1])
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path} is not a text file (corrupt?): {exc}") from None


def load_word_counts(path: str | os.PathLike[str], vocab_size: int | None = None) -> dict[str, int]:
    """``stackoverflow.word_count`` as ``{word: count}`` in file order (descending count), first ``vocab_size``
    (:func:`read_word_counts` reads the lines; a word listed twice is an error).

    The word vocabulary of the standard tasks is ``list(load_word_counts(path, 10_000))``. A file shorter than
    ``vocab_size`` gives all of it.
    """
    _check_vocab_size(vocab_size)
    counts: dict[str, int] = {}
    for number, word, count in read_word_counts(path):
        if word in counts:
            raise DatasetError(f"{path}, line {number}: word {word!r} is listed twice")
        counts[word] = count
        if len(counts) == vocab_size:
            break
    if not counts:
        raise DatasetError(f"{path} is empty: expected 'word count' lines")
    return counts


def load_tag_counts(path: str | os.PathLike[str], vocab_size: int | None = None) -> dict[str, int]:
    """``stackoverflow.tag_count`` as ``{tag: count}`` sorted by count, descending, ties in file order (TFF's
    ``sorted(..., reverse=True)`` is stable), then the first ``vocab_size``: the standard tag vocabulary is
    ``list(load_tag_counts(path, 500))``. A kept tag with no UTF-8 form (a lone surrogate written as a JSON escape)
    is an error, as TFF's lookup table cannot hold it."""
    _check_vocab_size(vocab_size)
    path = Path(path)
    if not path.is_file():
        raise DatasetError(
            f"tag count file {path} does not exist: {_hint('stackoverflow.tag_count.tar.bz2')} and extract it"
        )
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (ValueError, RecursionError) as exc:  # a JSON or Unicode decoding error, or an integer too long
        raise DatasetError(f"{path} is not a JSON file (corrupt or truncated?): {exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise DatasetError(f"{path} must hold one non-empty JSON object {{tag: count}}, got {type(raw).__name__}")
    bad = [(tag, count) for tag, count in raw.items() if not isinstance(count, int) or isinstance(count, bool)]
    if bad:
        raise DatasetError(f"{path}: tag counts must be integers, got {bad[:3]}")
    ranked = sorted(raw.items(), key=lambda item: item[1], reverse=True)[:vocab_size]
    for tag, _ in ranked:
        try:
            tag.encode("utf-8")
        except UnicodeEncodeError:
            raise DatasetError(
                f"{path}: tag {tag!r} holds a lone surrogate (a JSON escape such as \\udce9), which has no UTF-8 "
                "form: TFF cannot look it up (TensorFlow refuses to make it a tf.string)"
            ) from None
    return dict(ranked)


__all__ = [
    "FIELDS",
    "H5_FILES",
    "SPLITS",
    "SQLITE_FILE",
    "TAG_COUNT_FILE",
    "WORD_COUNT_FILE",
    "Columns",
    "StackOverflowExample",
    "StackOverflowH5",
    "StackOverflowReader",
    "StackOverflowSqlite",
    "add_client_index",
    "columns_to_examples",
    "decode_stackoverflow_example",
    "decode_text",
    "encode_text",
    "load_tag_counts",
    "load_word_counts",
    "open_stackoverflow",
    "read_word_counts",
]
