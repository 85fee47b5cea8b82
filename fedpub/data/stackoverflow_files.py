"""What ``fedpub data info|verify`` says about federated StackOverflow's files: a TFF HDF5 file (verify reads every
client's six datasets as a run does), its SQLite database's splits (the train split and a test or held-out split a
run reads, and the reader that decodes every row for verify), and the two vocabulary files
``stackoverflow.word_count`` and ``stackoverflow.tag_count`` (verify loads the word vocabulary a run loads).
"""

from __future__ import annotations

from pathlib import Path

from fedpub.data.file_report import Describer, FileDescribers, FileReport, spread
from fedpub.data.stackoverflow import (
    StackOverflowH5,
    StackOverflowSqlite,
    load_tag_counts,
    load_word_counts,
    read_word_counts,
)
from fedpub.data.stackoverflow_tasks import WORD_VOCAB_SIZE


def describe_h5(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "federated StackOverflow, TFF HDF5"
    with StackOverflowH5(path) as ds:
        counts = [ds.num_examples(client_id) for client_id in ds.client_ids]
        if deep:  # every client's six datasets read as a run reads them
            for client_id in ds.client_ids:
                ds.columns(client_id)
    report.add("clients", len(counts))
    report.add("examples", spread(counts))


def _missing_splits(names: set[str]) -> list[str]:
    """The splits a run reads: train, and test or heldout (its ``data.stackoverflow.test_split``)."""
    return [s for s in ("train",) if s not in names] + ([] if names & {"test", "heldout"} else ["test"])


def describe_word_count(path: Path, report: FileReport, deep: bool) -> None:
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


def describe_tag_count(path: Path, report: FileReport, deep: bool) -> None:
    report.layout = "StackOverflow tag_count"
    tags = load_tag_counts(path)  # sorted by count, descending
    report.add("tags", len(tags))
    report.add("most frequent", ", ".join(f"{t!r} {c}" for t, c in list(tags.items())[:3]))


HF_METADATA = frozenset({"state.json", "dataset_info.json", "dataset_dict.json"})
"""The JSON files of a Hugging Face ``save_to_disk`` folder: JSON objects, but no tag counts."""


def side_file(path: Path) -> Describer | None:
    """The vocabulary files: ``*word_count`` by name, ``*tag_count`` by name or a JSON object's opening brace
    (not a Hugging Face folder's metadata, :data:`HF_METADATA`)."""
    if path.name.endswith("word_count"):
        return describe_word_count
    if path.name in HF_METADATA:
        return None
    with open(path, "rb") as f:
        head = f.read(16)
    if path.name.endswith("tag_count") or head.lstrip().startswith(b"{"):
        return describe_tag_count
    return None


DESCRIBERS = FileDescribers(
    label="federated StackOverflow", hdf5=describe_h5, sqlite_reader=StackOverflowSqlite,
    missing_sqlite_splits=_missing_splits, side_file=side_file,
)
