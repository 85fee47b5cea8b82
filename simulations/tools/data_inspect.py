"""What a dataset file holds and whether it is intact, for ``fedpub data info|verify``
(:mod:`fedpub.simulations.tools.data_cli`).

The containers are read here: TFF's HDF5 files and SQLite databases, ``.sqlite.lzma`` streams and the ``.tar.bz2``
archives of the registry's downloads. A file named like TFF's (``.h5``, ``.sqlite``) that is not one is a problem,
not skipped. What a file of a dataset holds is said by that dataset's describers
(:attr:`fedpub.data.spec.Dataset.describers`), the dataset recognised by the fields of its HDF5 client groups, the
split names of its SQLite database, or (its other files) by the dataset itself.

``verify`` (``deep``) never passes a file a run refuses: it reads every example with the readers' own checks (every
client of an HDF5 file; every row of a SQLite database in one scan of ``examples``, decoded by the dataset reader's
``decode_rows``, with each client's row count against ``client_metadata``) and loads the vocabularies as a run does.
That is a read of the whole file: for TFF's largest database, about 169 million rows decoded in Python (at
roughly 20,000 rows a second per core here: hours).
"""

from __future__ import annotations

import lzma
import sqlite3
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import h5py

from fedpub.data import registry
from fedpub.data.base import DatasetError, h5_errors
from fedpub.data.download import CHUNK, REGISTRY, SQLITE_HEADER, check_lzma_sqlite_header, check_tar_bz2, sha256_of
from fedpub.data.file_report import Describer, FileDescribers, FileReport, SplitReader, size_text
from fedpub.data.spec import Dataset, resolve
from fedpub.data.tff_sqlite import connect_tff_sqlite, has_client_index

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
    dataset = registry.dataset_of_client_fields(fields)
    if dataset is None:
        report.problems.append(f"clients hold {sorted(fields, key=str)}: no registered dataset's layout ({_layouts()})")
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
        names = {s for s, _, _ in splits}
        dataset = registry.dataset_of_sqlite_splits(names)
        describers = _describers(dataset) if dataset is not None else None
        if describers is not None:
            report.layout = f"{describers.label}, TFF SQLite"
        else:
            report.layout = "TFF SQLite"
            known = "; ".join(f"{d.name}: {', '.join(d.sqlite_splits)}" for d in registry.DATASETS if d.sqlite_splits)
            report.problems.append(f"splits {sorted(map(str, names))} are no registered dataset's ({known})")
        for split, clients, examples in splits:
            note = describers.sqlite_split_note(split) if describers is not None else ""
            report.add(f"split {split}", f"{clients} clients, {examples} examples{note}")
        if describers is not None:
            report.problems += [f"split {split} has no clients: a run that reads it refuses the file"
                                for split in describers.missing_sqlite_splits(names)]
        indexed = has_client_index(connection)
        report.add(
            "index on client_id",
            "yes" if indexed else "none (as TFF writes it): each client read scans the whole table; "
            "fedpub.data.tff_sqlite.add_client_index adds one",
        )
        if deep and not report.problems:
            _check_integrity(connection, report)
        if deep and not report.problems and describers is not None and describers.sqlite_reader is not None:
            _check_every_example(path, connection, sorted(names), describers.sqlite_reader, report)
            if not report.problems:
                report.add("checked", "SQLite's integrity check, tables, per-client example counts, every example "
                                      "decoded as a run decodes it")
    finally:
        connection.close()


def _check_integrity(connection: sqlite3.Connection, report: FileReport) -> None:
    """SQLite's own ``PRAGMA integrity_check``: a damaged page or an index that disagrees with its table (a run reads
    each client through the index, the scan below reads the table, so only this check sees them disagree)."""
    try:
        found = [str(row[0]) for row in connection.execute("PRAGMA integrity_check(5)")]
    except sqlite3.DatabaseError as error:
        found = [str(error)]
    if found != ["ok"]:
        report.problems.append(f"SQLite's integrity check fails ({found[0]}): the file is damaged; download it again")


def _check_every_example(
    path: Path, connection: sqlite3.Connection, splits: list[str], open_split: Callable[[Path, str], SplitReader],
    report: FileReport,
) -> None:
    """What a run would refuse, in one scan of ``examples``: each split opened by the dataset's reader (the checks of
    ``client_metadata``), every listed client's row count against it, and every row of a listed client decoded by
    the reader's ``decode_rows``, a client's consecutive rows at a time (TFF writes a client's rows together)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the missing index is reported as a fact
        readers = {split: open_split(path, split) for split in splits}
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


def _describer(path: Path) -> Describer | None:
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
    if digest == entry.sha256:
        report.add("checksum", f"matches ({entry.checksum_note()})")
    else:
        report.problems.append(f"SHA-256 {digest} does not match the registry's {entry.sha256}")


def hf_folder(path: Path) -> bool:
    """Whether the directory ``path`` is a Hugging Face ``save_to_disk`` folder (one split's, or a DatasetDict's)."""
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file())


def describe_hf_folder(path: Path) -> FileReport:
    """A Hugging Face ``save_to_disk`` folder as ``datasets.load_from_disk`` opens it (as ``data.source
    huggingface`` does): its splits, rows and columns; which columns are a run's is the config's (``verify
    --config``)."""
    report = FileReport(path)
    report.layout = "a Hugging Face dataset folder (save_to_disk)"
    try:
        import datasets

        loaded = datasets.load_from_disk(str(path))
    except ImportError:
        report.problems.append("reading it needs the `datasets` library: pip install 'fedpub[hf]'")
        return report
    except (OSError, ValueError, KeyError) as error:  # what load_from_disk raises on a damaged folder
        report.problems.append(f"datasets.load_from_disk cannot open it ({type(error).__name__})")
        return report
    splits = dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"(one split)": loaded}
    for name, split in splits.items():
        columns = ", ".join(f"{column}: {feature}" for column, feature in split.features.items())
        report.add(f"split {name}", f"{split.num_rows} rows; columns {columns}")
    report.add("read as", "data.source huggingface with data.table's user, x and y columns; `fedpub data verify "
               "--config CONFIG.yaml` reads every user as a run does")
    return report


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
