"""What a dataset file holds and whether it is intact, for ``fedpub data info|verify`` (:mod:`fedpub.simulations.data_cli`).

Layouts recognised (shared/reference/datasets.md §1-2): federated EMNIST as TFF HDF5 files, as TFF's SQLite
database or its ``.sqlite.lzma``; federated StackOverflow as HDF5 files or SQLite, ``stackoverflow.word_count`` and
``stackoverflow.tag_count``; the registry's ``.tar.bz2`` archives. A file named like TFF's (``.h5``, ``.sqlite``)
that is not one is a problem, not skipped.

``verify`` (``deep``) never passes a file a run refuses: it reads every example with the readers' own checks (every
client of an HDF5 file; every row of a SQLite database in one scan of ``examples``, decoded by the reader's
``decode_rows``, with each client's row count against ``client_metadata``) and loads the vocabularies as a run does.
That is a read of the whole file: for TFF's StackOverflow database, about 169 million rows decoded in Python (at
roughly 20,000 rows a second per core here: hours).
"""

from __future__ import annotations

import lzma
import sqlite3
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from fedpub.data.base import DatasetError, h5_errors
from fedpub.data.download import (
    CHUNK,
    REGISTRY,
    SQLITE_HEADER,
    check_lzma_sqlite_header,
    check_tar_bz2,
    sha256_of,
)
from fedpub.data.emnist import EmnistH5
from fedpub.data.emnist_sqlite import SPLITS as EMNIST_SPLITS
from fedpub.data.emnist_sqlite import EmnistSqlite, connect_tff_sqlite, has_client_index
from fedpub.data.stackoverflow import FIELDS as SO_FIELDS
from fedpub.data.stackoverflow import SPLITS as SO_SPLITS
from fedpub.data.stackoverflow import (
    StackOverflowH5,
    StackOverflowSqlite,
    load_tag_counts,
    load_word_counts,
    read_word_counts,
)
from fedpub.data.stackoverflow_tasks import WORD_VOCAB_SIZE


XZ_MAGIC = b"\xfd7zXZ\x00"


@dataclass
class FileReport:
    """What one file holds (``facts``, label/value pairs) and what is wrong with it (``problems``)."""

    path: Path
    layout: str = "unknown"
    facts: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, label: str, value: object) -> None:
        self.facts.append((label, str(value)))


def size_text(num_bytes: int) -> str:
    if num_bytes < 1024:
        return f"{num_bytes} B"
    value, unit = num_bytes / 1024, "KiB"
    for larger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.1f} {unit} ({num_bytes} B)"


def _spread(counts: list[int]) -> str:
    return f"{sum(counts)} (per client min {min(counts)}, median {int(np.median(counts))}, max {max(counts)})"


# ---------------------------------------------------------------------------------------------------------------
# One describer per layout; ``deep`` (verify) reads more than ``info`` does.


def _describe_emnist_h5(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "federated EMNIST, TFF HDF5"
    with EmnistH5(path) as ds:
        counts = [ds.num_examples(c) for c in ds.client_ids]  # checks every client's shapes and dtypes
        if deep:  # reads every client, with EmnistH5's pixel and label range checks
            for client_id in ds.client_ids:
                ds.client_data(client_id)
        client_ids, num_classes = ds.client_ids, ds.num_classes
    report.add("clients", len(client_ids))
    report.add("examples", _spread(counts))
    with h5py.File(path, "r") as f, h5_errors(str(path)):
        labels = np.concatenate([f["examples"][c]["label"][()].reshape(-1) for c in client_ids])
    distinct = np.unique(labels)
    report.add("classes", f"{len(distinct)} distinct labels seen; {num_classes} expected (from the file name)")
    if distinct.size and (distinct[0] < 0 or distinct[-1] >= num_classes):
        report.problems.append(f"labels in [{distinct[0]}, {distinct[-1]}], outside [0, {num_classes - 1}]")


def _describe_so_h5(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "federated StackOverflow, TFF HDF5"
    with StackOverflowH5(path) as ds:
        counts = [ds.num_examples(client_id) for client_id in ds.client_ids]
        if deep:  # every client's six datasets read as a run reads them
            for client_id in ds.client_ids:
                ds.columns(client_id)
    report.add("clients", len(counts))
    report.add("examples", _spread(counts))


def _describe_hdf5(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "HDF5"
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        report.problems.append(f"not a readable HDF5 file: {exc}")
        return
    with f, h5_errors(str(path)):  # a damaged file: a DatasetError naming it, not h5py's own exception
        examples = f.get("examples")
        first = next(iter(examples.values()), None) if isinstance(examples, h5py.Group) else None
        if not isinstance(first, h5py.Group):
            report.problems.append("no 'examples' group of client groups: not a TFF federated HDF5 file")
            return
        fields = set(first.keys())
    if set(SO_FIELDS) <= fields:
        _describe_so_h5(path, report, deep)
    elif {"label", "pixels"} <= fields:
        _describe_emnist_h5(path, report, deep)
    else:
        report.problems.append(f"clients hold {sorted(fields)}: neither EMNIST (label, pixels) nor StackOverflow")


def _describe_sqlite(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "SQLite"
    connection = connect_tff_sqlite(path)
    try:
        splits = connection.execute(
            "SELECT split_name, COUNT(DISTINCT client_id), SUM(num_examples) FROM client_metadata "
            "GROUP BY split_name ORDER BY split_name"
        ).fetchall()
        names = {s for s, _, _ in splits}
        if names and names <= set(EMNIST_SPLITS):
            report.layout = "federated EMNIST, TFF SQLite"
        elif names and names <= set(SO_SPLITS):
            report.layout = "federated StackOverflow, TFF SQLite"
        else:
            report.layout = "TFF SQLite"
            report.problems.append(f"splits {sorted(names)} are neither EMNIST's nor StackOverflow's")
        for split, clients, examples in splits:
            classes = f", {EMNIST_SPLITS[split]} classes" if split in EMNIST_SPLITS else ""
            report.add(f"split {split}", f"{clients} clients, {examples} examples{classes}")
        report.problems += [f"split {split} has no clients: a run that reads it refuses the file"
                            for split in _missing_splits(names)]
        indexed = has_client_index(connection)
        report.add(
            "index on client_id",
            "yes" if indexed else "none (as TFF writes it): each client read scans the whole table; "
            "fedpub.data.emnist_sqlite.add_client_index adds one",
        )
        if deep and not report.problems:
            _check_every_example(path, connection, sorted(names), report)
            if not report.problems:
                report.add("checked", "tables, per-client example counts, every example decoded as a run decodes it")
    finally:
        connection.close()


def _missing_splits(names: set[str]) -> list[str]:
    """The splits a run reads beside those present: StackOverflow's train and one of test or heldout (its
    ``data.stackoverflow.test_split``), EMNIST's test split of a train split and the reverse."""
    if names and names <= set(SO_SPLITS):
        return [s for s in ("train",) if s not in names] + ([] if names & {"test", "heldout"} else ["test"])
    pairs = [(f"{kind}_train", f"{kind}_test") for kind in ("digits_only", "all")]
    return [other for pair in pairs for split, other in (pair, pair[::-1]) if split in names and other not in names]


def _check_every_example(path: Path, connection: sqlite3.Connection, splits: list[str], report: FileReport) -> None:
    """What a run would refuse, in one scan of ``examples``: each split opened by its reader (the checks of
    ``client_metadata``), every listed client's row count against it, and every row of a listed client decoded by
    the reader's ``decode_rows``, a client's consecutive rows at a time (TFF writes a client's rows together)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the missing index is reported as a fact
        readers = {
            split: EmnistSqlite(path, split) if split in EMNIST_SPLITS else StackOverflowSqlite(path, split)
            for split in splits
        }
    try:
        listed = {split: set(reader.client_ids) for split, reader in readers.items()}
        stored: Counter[tuple[object, object]] = Counter()
        run: tuple[object, object] | None = None
        blobs: list[object] = []

        def decode(key: tuple[object, object] | None) -> None:
            if key is not None and blobs:
                readers[key[0]].decode_rows(key[1], blobs)  # type: ignore[index, arg-type]
            blobs.clear()

        for split, client_id, blob in connection.execute(
            "SELECT split_name, client_id, serialized_example_proto FROM examples"
        ):
            if (split, client_id) != run:
                decode(run)
                run = (split, client_id)
            stored[run] += 1
            if client_id in listed.get(split, ()):
                blobs.append(blob)
        decode(run)
        unlisted = sorted({str(s) for s, _ in stored if s not in readers})
        if unlisted:
            report.problems.append(f"example rows of split(s) {unlisted} have no client_metadata: a run never reads them")
        for split, reader in readers.items():
            claimed = {c: reader.num_examples(c) for c in reader.client_ids}
            present = set(claimed) | {c for (s, c) in stored if s == split}
            wrong = [c for c in present if stored[(split, c)] != claimed.get(c, 0)]  # type: ignore[call-overload]
            if wrong:
                first = min(wrong, key=str)
                report.problems.append(
                    f"split {split}: {len(wrong)} client(s) whose example rows disagree with client_metadata "
                    f"(first: {first!r} has {stored[(split, first)]} rows, metadata says {claimed.get(first)})"
                )
    finally:
        for reader in readers.values():
            reader.close()


def _describe_lzma(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "lzma-compressed"
    with open(path, "rb") as f:
        container = "xz" if f.read(len(XZ_MAGIC)) == XZ_MAGIC else "lzma (LZMA_Alone)"
    report.add("container", container)
    check_lzma_sqlite_header(path)
    report.layout = "lzma-compressed TFF SQLite"
    if deep:  # the whole stream, for corruption and truncation
        decompressor, total = lzma.LZMADecompressor(), 0
        with open(path, "rb") as f:
            while not decompressor.eof and (chunk := f.read(CHUNK)):
                try:
                    total += len(decompressor.decompress(chunk))
                except lzma.LZMAError as exc:
                    report.problems.append(f"corrupt lzma stream: {exc}")
                    return
        if not decompressor.eof:
            report.problems.append("the lzma stream is truncated")
            return
        report.add("decompressed size", size_text(total))
    cache = path.with_name(path.name.removesuffix(".lzma"))
    if cache.is_file() and cache.stat().st_mtime >= path.stat().st_mtime:
        inner = FileReport(cache)
        _describe_sqlite(cache, inner, deep)
        report.layout = f"lzma-compressed {inner.layout}"
        report.add("decompressed copy", str(cache))
        report.facts.extend(inner.facts)
        report.problems.extend(inner.problems)
    else:
        report.add("decompressed copy", f"none yet ({cache} is written on first use by the reader)")


def _describe_archive(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "tar.bz2 archive"
    members = check_tar_bz2(path)
    report.add("members", ", ".join(f"{name} ({size_text(size)})" for name, size in members) or "none")
    entry = REGISTRY.get(path.name)
    if entry is not None:
        missing = [m for m in entry.members if m not in {name for name, _ in members}]
        if missing:
            report.problems.append(f"the archive lacks {', '.join(missing)}")
        absent = [m for m in entry.members if not (path.parent / m).is_file()]
        if absent and not report.problems:
            report.add(
                "extracted",
                f"not yet ({', '.join(absent)}): `fedpub data download {path.name} --dir {path.parent}` "
                "extracts it without downloading again",
            )


def _describe_word_count(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "StackOverflow word_count"
    if deep:
        load_word_counts(path, WORD_VOCAB_SIZE)  # the vocabulary a run loads, with its checks
    words, previous, top = 0, None, []
    for number, word, count in read_word_counts(path):
        if previous is not None and count > previous:
            report.problems.append(f"line {number}: counts are not in descending order ({previous} then {count})")
            return
        previous, words = count, words + 1
        if len(top) < 3:
            top.append(f"{word!r} {count}")
    report.add("words", words)
    report.add("most frequent", ", ".join(top) or "none")


def _describe_tag_count(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "StackOverflow tag_count"
    tags = load_tag_counts(path)  # sorted by count, descending
    report.add("tags", len(tags))
    report.add("most frequent", ", ".join(f"{t!r} {c}" for t, c in list(tags.items())[:3]))


def _describer(path: Path) -> Callable[[Path, FileReport, bool], None] | None:
    name = path.name
    if name.endswith(".tar.bz2"):
        return _describe_archive
    if name.endswith(".lzma"):
        return _describe_lzma
    with open(path, "rb") as f:
        head = f.read(16)
    if h5py.is_hdf5(path) or name.endswith(".h5"):  # named like TFF's files: a problem if it is not one
        return _describe_hdf5
    if head == SQLITE_HEADER or name.endswith(".sqlite"):
        return _describe_sqlite
    if name.endswith("word_count"):
        return _describe_word_count
    if name.endswith("tag_count") or head.lstrip().startswith(b"{"):
        return _describe_tag_count
    return None


def _checksum(path: Path, report: FileReport) -> None:
    entry = REGISTRY.get(path.name)
    if entry is None:
        return
    if entry.sha256 is None:
        report.add("checksum", "none published: checked by structure only")
        return
    digest = sha256_of(path)
    if digest == entry.sha256:
        report.add("checksum", f"matches ({entry.checksum_note()})")
    else:
        report.problems.append(f"SHA-256 {digest} does not match the registry's {entry.sha256}")


def inspect_path(path: Path, *, deep: bool) -> FileReport | None:
    """Describe one file (None when it is no dataset file fedpub knows).

    ``deep`` (verify) adds the registry checksum, where one is published, and reads more of the file.
    """
    describe = _describer(path)
    if describe is None:
        return None
    report = FileReport(path)
    report.add("size", size_text(path.stat().st_size))
    if deep:
        _checksum(path, report)
    try:
        describe(path, report, deep)
    except (DatasetError, OSError, UnicodeDecodeError, sqlite3.Error) as exc:
        report.problems.append(str(exc))
    return report


# ---------------------------------------------------------------------------------------------------------------
# Commands.


