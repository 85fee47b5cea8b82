"""What ``fedpub data info|verify`` says about federated StackOverflow's files: a TFF HDF5 file (verify checks every
client's six datasets from metadata), its SQLite database's splits (the first example decoded), and the two
vocabulary files ``stackoverflow.word_count`` and ``stackoverflow.tag_count``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fedpub.data.file_report import Describer, FileDescribers, FileReport, spread
from fedpub.data.stackoverflow import StackOverflowH5, decode_stackoverflow_example, load_tag_counts, read_word_counts


def describe_h5(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "federated StackOverflow, TFF HDF5"
    with StackOverflowH5(path) as ds:  # deep: every client's six datasets checked, from metadata only
        count = ds.check_client if deep else ds.num_examples
        counts = [count(client_id) for client_id in ds.client_ids]
    report.add("clients", len(counts))
    report.add("examples", spread(counts))


def _check_split(path: Path, connection: sqlite3.Connection, split: str) -> None:
    row = connection.execute(
        "SELECT serialized_example_proto FROM examples WHERE split_name = ? LIMIT 1", (split,)
    ).fetchone()
    if row is not None:
        decode_stackoverflow_example(row[0], f"split {split!r}, first example")


def describe_word_count(path: Path, report: FileReport, deep: bool) -> None:
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


def describe_tag_count(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "StackOverflow tag_count"
    tags = load_tag_counts(path)  # sorted by count, descending
    report.add("tags", len(tags))
    report.add("most frequent", ", ".join(f"{t!r} {c}" for t, c in list(tags.items())[:3]))


def side_file(path: Path) -> Describer | None:
    """The vocabulary files: ``*word_count`` by name, ``*tag_count`` by name or a JSON object's opening brace."""
    if path.name.endswith("word_count"):
        return describe_word_count
    with open(path, "rb") as f:
        head = f.read(16)
    if path.name.endswith("tag_count") or head.lstrip().startswith(b"{"):
        return describe_tag_count
    return None


DESCRIBERS = FileDescribers(
    label="federated StackOverflow", hdf5=describe_h5, check_sqlite_split=_check_split, side_file=side_file
)
