"""What a dataset file holds and whether it is intact, for ``fedpub data info|verify`` (:mod:`fedpub.simulations.data_cli`).

Layouts recognised (shared/reference/datasets.md §1-2): federated EMNIST as TFF HDF5 files, as TFF's SQLite
database or its ``.sqlite.lzma``; federated StackOverflow as HDF5 files or SQLite (recognised by structure, counts
only), ``stackoverflow.word_count`` and ``stackoverflow.tag_count``; the registry's ``.tar.bz2`` archives.
"""

from __future__ import annotations

import lzma
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from fedpub.data.base import DatasetError
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
from fedpub.data.emnist_sqlite import EmnistSqlite, connect_tff_sqlite
from fedpub.data.stackoverflow import FIELDS as SO_FIELDS
from fedpub.data.stackoverflow import SPLITS as SO_SPLITS
from fedpub.data.stackoverflow import StackOverflowH5, decode_stackoverflow_example, load_tag_counts, read_word_counts


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
    with h5py.File(path, "r") as f:
        labels = np.concatenate([f["examples"][c]["label"][()].reshape(-1) for c in client_ids])
    distinct = np.unique(labels)
    report.add("classes", f"{len(distinct)} distinct labels seen; {num_classes} expected (from the file name)")
    if distinct.size and (distinct[0] < 0 or distinct[-1] >= num_classes):
        report.problems.append(f"labels in [{distinct[0]}, {distinct[-1]}], outside [0, {num_classes - 1}]")


def _describe_so_h5(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "federated StackOverflow, TFF HDF5"
    with StackOverflowH5(path) as ds:  # deep: every client's six datasets checked, from metadata only
        count = ds.check_client if deep else ds.num_examples
        counts = [count(client_id) for client_id in ds.client_ids]
    report.add("clients", len(counts))
    report.add("examples", _spread(counts))


def _describe_hdf5(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "HDF5"
    try:
        with h5py.File(path, "r") as f:
            examples = f.get("examples")
            if not isinstance(examples, h5py.Group) or not len(examples):
                report.problems.append("no 'examples' group with clients: not a TFF federated HDF5 file")
                return
            fields = set(examples[next(iter(examples))].keys())
    except OSError as exc:
        report.problems.append(f"not a readable HDF5 file: {exc}")
        return
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
            if not deep:
                continue
            stored = dict(
                connection.execute(
                    "SELECT client_id, COUNT(*) FROM examples WHERE split_name = ? GROUP BY client_id", (split,)
                ).fetchall()
            )
            claimed = dict(
                connection.execute(
                    "SELECT client_id, num_examples FROM client_metadata WHERE split_name = ?", (split,)
                ).fetchall()
            )
            wrong = sorted(c for c in set(stored) | set(claimed) if stored.get(c, 0) != claimed.get(c, 0))
            if wrong:
                report.problems.append(
                    f"split {split}: {len(wrong)} client(s) whose example rows disagree with client_metadata "
                    f"(first: {wrong[0]!r} has {stored.get(wrong[0], 0)} rows, metadata says {claimed.get(wrong[0])})"
                )
            if split in EMNIST_SPLITS:
                with EmnistSqlite(path, split) as ds:
                    ds.client_data(ds.client_ids[0])  # decodes and checks the first client's examples
            elif split in SO_SPLITS:
                row = connection.execute(
                    "SELECT serialized_example_proto FROM examples WHERE split_name = ? LIMIT 1", (split,)
                ).fetchone()
                if row is not None:
                    decode_stackoverflow_example(row[0], f"split {split!r}, first example")
        if deep:
            report.add("checked", "tables, per-client example counts, first client of each split decoded")
    finally:
        connection.close()


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
    if h5py.is_hdf5(path):
        return _describe_hdf5
    if head == SQLITE_HEADER:
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


