"""What a dataset file holds and whether it is intact, for ``fedpub data info|verify``
(:mod:`fedpub.simulations.data_cli`).

The containers are read here: TFF's HDF5 files and SQLite databases, ``.sqlite.lzma`` streams and the ``.tar.bz2``
archives of the registry's downloads. What a file of a dataset holds is said by that dataset's describers
(:attr:`fedpub.data.spec.Dataset.describers`), the dataset recognised by the fields of its HDF5 client groups, the
split names of its SQLite database, or (its other files) by the dataset itself.
"""

from __future__ import annotations

import lzma
import sqlite3
from pathlib import Path

import h5py

from fedpub.data import registry
from fedpub.data.base import DatasetError
from fedpub.data.download import CHUNK, REGISTRY, SQLITE_HEADER, check_lzma_sqlite_header, check_tar_bz2, sha256_of
from fedpub.data.file_report import Describer, FileDescribers, FileReport, size_text
from fedpub.data.spec import Dataset, resolve
from fedpub.data.tff_sqlite import connect_tff_sqlite

XZ_MAGIC = b"\xfd7zXZ\x00"


def _describers(dataset: Dataset) -> FileDescribers:
    describers: FileDescribers = resolve(dataset.describers)
    return describers


def _layouts() -> str:
    """Every registered dataset's HDF5 client fields, for a message about a file that has none of them."""
    return "; ".join(f"{d.name} ({', '.join(sorted(d.client_fields))})" for d in registry.DATASETS)


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
    dataset = registry.dataset_of_client_fields(fields)
    if dataset is None:
        report.problems.append(f"clients hold {sorted(fields)}: no registered dataset's layout ({_layouts()})")
        return
    _describers(dataset).hdf5(path, report, deep)


def _describe_sqlite(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "SQLite"
    connection = connect_tff_sqlite(path)
    try:
        splits = connection.execute(
            "SELECT split_name, COUNT(DISTINCT client_id), SUM(num_examples) FROM client_metadata "
            "GROUP BY split_name ORDER BY split_name"
        ).fetchall()
        dataset = registry.dataset_of_sqlite_splits({s for s, _, _ in splits})
        if dataset is None:
            report.layout = "TFF SQLite"
            known = "; ".join(f"{d.name}: {', '.join(d.sqlite_splits)}" for d in registry.DATASETS if d.sqlite_splits)
            report.problems.append(f"splits {sorted(s for s, _, _ in splits)} are no registered dataset's ({known})")
            return
        describers = _describers(dataset)
        report.layout = f"{describers.label}, TFF SQLite"
        for split, clients, examples in splits:
            report.add(f"split {split}", f"{clients} clients, {examples} examples{describers.sqlite_split_note(split)}")
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
            describers.check_sqlite_split(path, connection, split)
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


def _describer(path: Path) -> Describer | None:
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
    for dataset in registry.DATASETS:
        describe = _describers(dataset).side_file(path)
        if describe is not None:
            return describe
    return None


def _checksum(path: Path, report: FileReport) -> None:
    entry = REGISTRY.get(path.name)
    if entry is None:
        return
    if entry.sha256 is None:
        report.add("checksum", "none published: checked by structure only")
        return
    digest = sha256_of(path)
    if entry.sha256.matches(digest):
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
