"""`fedpub data info | verify | download` through typer's runner, on files written here in TFF's layouts."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from fedpub.data.emnist import load_emnist_split
from fedpub.data.download import REGISTRY
from fedpub.data.emnist_writers import read_emnist_clients, write_emnist_h5, write_emnist_sqlite
from fedpub.data.base import DatasetError
from fedpub.data.stackoverflow import StackOverflowExample, StackOverflowSqlite, decode_text
from fedpub.data.stackoverflow_writers import write_stackoverflow_sqlite
from fedpub.data.tf_example import encode_example
from fedpub.simulations.tools.data_cli import data_app
from tests.data.test_download import FileServer, closed_port_url, serve_registry_file, server, tar_bz2  # noqa: F401

runner = CliRunner()
SO_EXAMPLE = {
    "creation_date": [b"2010-01-08 09:34:05 UTC"],
    "score": [-1],
    "tags": [b"vb . net|iterator"],
    "title": [b"how to loop"],
    "tokens": [b"see <URL> ."],
    "type": [b"answer"],
}


_POST = StackOverflowExample(
    creation_date="2010-01-08 09:34:05 UTC", score=1, tags="python", title="", tokens="a list .", type="question"
)


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(data_app, list(args), terminal_width=200)
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def emnist_dir(tmp_path_factory: pytest.TempPathFactory, tiny_emnist_dir: Path) -> Path:
    """The tiny synthetic data as TFF HDF5 files and as emnist_all.sqlite (+ .lzma)."""
    root = tmp_path_factory.mktemp("emnist")
    train, test = load_emnist_split(tiny_emnist_dir, only_digits=True)
    with train, test:
        clients = {"train": read_emnist_clients(train), "test": read_emnist_clients(test)}
    write_emnist_h5(root / "fed_emnist_digitsonly_train.h5", clients["train"])
    write_emnist_h5(root / "fed_emnist_digitsonly_test.h5", clients["test"])
    splits = {"digits_only_train": clients["train"], "digits_only_test": clients["test"]}
    write_emnist_sqlite(root / "lzma" / "emnist_all.sqlite.lzma", splits)
    write_emnist_sqlite(root / "emnist_all.sqlite", splits)
    return root


def write_so_h5(path: Path, sizes: dict[str, int]) -> None:
    text = h5py.string_dtype("ascii")
    with h5py.File(path, "w") as f:
        for client_id, n in sizes.items():
            group = f.create_group(f"examples/{client_id}")
            for name, values in SO_EXAMPLE.items():
                if name == "score":
                    group.create_dataset(name, data=np.array(values * n, dtype=np.int64))
                else:
                    group.create_dataset(name, data=np.array(values * n, dtype=object), dtype=text)


def write_so_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE examples (split_name TEXT, client_id TEXT, serialized_example_proto BLOB)")
        connection.execute("CREATE TABLE client_metadata (client_id TEXT, split_name TEXT, num_examples INTEGER)")
        for split, client_id, n in [("train", "00000001", 3), ("heldout", "00000010", 2), ("test", "00000001", 1)]:
            connection.executemany(
                "INSERT INTO examples VALUES (?, ?, ?)", [(split, client_id, encode_example(SO_EXAMPLE))] * n
            )
            connection.execute("INSERT INTO client_metadata VALUES (?, ?, ?)", (client_id, split, n))
    connection.close()


def test_info_emnist_hdf5(emnist_dir: Path) -> None:
    code, out = invoke("info", str(emnist_dir / "fed_emnist_digitsonly_train.h5"))
    assert code == 0, out
    assert "federated EMNIST, TFF HDF5" in out and "clients: 16" in out
    assert "10 expected (from the file name)" in out and "size:" in out
    with h5py.File(emnist_dir / "fed_emnist_digitsonly_train.h5") as f:
        total = sum(g["label"].shape[0] for g in f["examples"].values())
    assert f"examples: {total} (per client" in out


def test_info_emnist_sqlite_and_lzma(emnist_dir: Path) -> None:
    code, out = invoke("info", str(emnist_dir / "emnist_all.sqlite"))
    assert code == 0, out
    assert "federated EMNIST, TFF SQLite" in out
    assert "split digits_only_train: 16 clients" in out and "10 classes" in out
    code, out = invoke("info", str(emnist_dir / "lzma" / "emnist_all.sqlite.lzma"))
    assert code == 0, out
    assert "lzma-compressed TFF SQLite" in out and "container: lzma (LZMA_Alone)" in out
    assert "decompressed copy: none yet" in out


def test_info_stackoverflow_files(tmp_path: Path) -> None:
    write_so_h5(tmp_path / "stackoverflow_held_out.h5", {"00000010": 4, "00000020": 2})
    code, out = invoke("info", str(tmp_path / "stackoverflow_held_out.h5"))
    assert code == 0, out
    assert "federated StackOverflow, TFF HDF5" in out and "clients: 2" in out and "examples: 6 " in out

    write_so_sqlite(tmp_path / "stackoverflow.sqlite")
    code, out = invoke("info", str(tmp_path / "stackoverflow.sqlite"))
    assert code == 0, out
    assert "federated StackOverflow, TFF SQLite" in out and "split heldout: 1 clients, 2 examples" in out

    (tmp_path / "stackoverflow.word_count").write_text(". 342309\nthe 341937\nto 300000\nvb 5\n")
    code, out = invoke("info", str(tmp_path / "stackoverflow.word_count"))
    assert code == 0, out
    assert "words: 4" in out and "'.' 342309, 'the' 341937, 'to' 300000" in out

    (tmp_path / "stackoverflow.tag_count").write_text(json.dumps({"galois-field": 58, "html": 167815, "c#": 9000}))
    code, out = invoke("info", str(tmp_path / "stackoverflow.tag_count"))
    assert code == 0, out
    assert "tags: 3" in out and "most frequent: 'html' 167815, 'c#' 9000, 'galois-field' 58" in out


def test_info_archive(tmp_path: Path) -> None:
    archive = tar_bz2({"fed_emnist_train.h5": b"x" * 10, "fed_emnist_test.h5": b""})
    (tmp_path / "fed_emnist.tar.bz2").write_bytes(archive)
    code, out = invoke("info", str(tmp_path / "fed_emnist.tar.bz2"))
    assert code == 0, out
    assert "members: fed_emnist_train.h5 (10 B), fed_emnist_test.h5 (0 B)" in out
    assert "extracted: not yet" in out and "fedpub data download fed_emnist.tar.bz2" in out


def test_info_errors(tmp_path: Path) -> None:
    code, out = invoke("info", str(tmp_path / "absent.h5"))
    assert code == 2 and "error:" in out and "absent.h5 is not a file" in out
    (tmp_path / "notes.txt").write_text("hello")
    code, out = invoke("info", str(tmp_path / "notes.txt"))
    assert code == 2 and "error:" in out and "not a dataset file fedpub recognises" in out
    (tmp_path / "stackoverflow.word_count").write_text("a 1\nb 5\n")
    code, out = invoke("info", str(tmp_path / "stackoverflow.word_count"))
    assert code == 1 and "problem: line 2: counts are not in descending order (1 then 5)" in out


def test_verify_good_directory(emnist_dir: Path) -> None:
    code, out = invoke("verify", str(emnist_dir))
    assert code == 0, out
    assert "3 of 3 file(s) ok" in out  # two HDF5 files and the SQLite database (the .lzma is in a subfolder)
    code, out = invoke("verify", str(emnist_dir / "lzma" / "emnist_all.sqlite.lzma"))
    assert code == 0, out
    assert "decompressed size:" in out and "checksum: none published" in out


def test_verify_reports_checksum_mismatch(emnist_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "fed_emnist.tar.bz2").write_bytes(tar_bz2({"fed_emnist_train.h5": b"not the real file"}))
    code, out = invoke("verify", str(tmp_path))
    assert code == 1, out
    assert f"{tmp_path / 'fed_emnist.tar.bz2'}" in out
    assert f"SHA-256 {hashlib.sha256((tmp_path / 'fed_emnist.tar.bz2').read_bytes()).hexdigest()} does not match" in out
    assert "the archive lacks fed_emnist_test.h5" in out and "FAILED" in out and "0 of 1 file(s) ok" in out
    assert "extracted: not yet" not in out  # no hint to extract a file that failed


def test_verify_structural_problems(emnist_dir: Path, tmp_path: Path) -> None:
    good = (emnist_dir / "fed_emnist_digitsonly_train.h5").read_bytes()
    (tmp_path / "fed_emnist_digitsonly_train.h5").write_bytes(good[: len(good) // 2])  # truncated copy
    db = tmp_path / "emnist_all.sqlite"
    db.write_bytes((emnist_dir / "emnist_all.sqlite").read_bytes())
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM examples WHERE rowid = (SELECT MAX(rowid) FROM examples)")
    connection.close()
    (tmp_path / "stackoverflow.sqlite.lzma").write_bytes(b"\x5d\x00\x00garbage")
    (tmp_path / "stackoverflow.tag_count.tar.bz2.part").write_bytes(b"half")
    (tmp_path / "README.txt").write_text("not data")
    code, out = invoke("verify", str(tmp_path))
    assert code == 1, out
    assert "fed_emnist_digitsonly_train.h5" in out and "not a readable HDF5 file" in out
    assert "1 client(s) whose example rows disagree with client_metadata" in out
    assert "stackoverflow.sqlite.lzma is not an lzma/xz file" in out
    assert "stackoverflow.tag_count.tar.bz2.part: incomplete download" in out
    assert "README.txt: skipped" in out
    assert "0 of 3 file(s) ok" in out


def test_verify_checks_stackoverflow_files_with_the_readers_rules(tmp_path: Path) -> None:
    """A client lacking a field, an example lacking a feature, a malformed count line: each a problem, in the
    readers' own words."""
    write_so_h5(tmp_path / "stackoverflow_train.h5", {"00000001": 2, "00000002": 3})
    with h5py.File(tmp_path / "stackoverflow_train.h5", "a") as f:
        del f["examples/00000002/title"]
    write_so_sqlite(tmp_path / "stackoverflow.sqlite")
    with sqlite3.connect(tmp_path / "stackoverflow.sqlite") as connection:
        untitled = encode_example({k: v for k, v in SO_EXAMPLE.items() if k != "title"})
        connection.execute("UPDATE examples SET serialized_example_proto = ? WHERE split_name = 'test'", (untitled,))
    connection.close()
    (tmp_path / "stackoverflow.word_count").write_text("the 12\nword\n")
    code, out = invoke("verify", str(tmp_path))
    assert code == 1, out
    assert "client '00000002' has no 'title' dataset" in out
    assert "stackoverflow.sqlite: split 'test', client '00000001', example 0 has no 'title' feature" in out
    assert "line 2: expected 'word count', got 'word'" in out
    assert "0 of 3 file(s) ok" in out


def test_verify_decodes_every_example_as_a_run_does(emnist_dir: Path, tmp_path: Path) -> None:
    """A malformed example of the last client (not the first one verify used to look at) fails verify, as it fails
    a run; text that is not valid UTF-8 does neither (TFF reads it as bytes)."""
    so = tmp_path / "stackoverflow.sqlite"
    posts = {f"0000000{i}": [{**_POST, "title": f"post {i}"}] * 2 for i in range(3)}
    posts["00000001"] = [{**_POST, "title": decode_text(b"caf\xe9 au lait")}]
    write_stackoverflow_sqlite(so, {"train": posts, "test": {"00000009": [_POST]}}, index=False)
    code, out = invoke("verify", str(so))
    assert code == 0, out
    assert "every example decoded as a run decodes it" in out and "index on client_id: none (as TFF writes it)" in out
    db = tmp_path / "emnist_all.sqlite"
    db.write_bytes((emnist_dir / "emnist_all.sqlite").read_bytes())
    with sqlite3.connect(so) as connection, sqlite3.connect(db) as emnist:
        last = "UPDATE examples SET serialized_example_proto = ? WHERE rowid = (SELECT MAX(rowid) FROM examples)"
        connection.execute(last, (encode_example({**SO_EXAMPLE, "score": [b"1"]}),))
        emnist.execute(last, (encode_example({"label": [3], "pixels": [0.5] * 783}),))
    connection.close()
    emnist.close()
    code, out = invoke("verify", str(tmp_path))
    assert code == 1, out
    assert "stackoverflow.sqlite: split 'test', client '00000009', example 0: feature 'score' is [b'1']" in out
    assert "has 783 'pixels' values, expected 784 floats" in out and "0 of 2 file(s) ok" in out
    with pytest.raises(DatasetError, match="client '00000009', example 0: feature 'score'"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        StackOverflowSqlite(so, "test").examples("00000009")  # what a run makes of it


def test_verify_reports_a_split_a_run_needs_and_rows_no_client_lists(tmp_path: Path) -> None:
    so = tmp_path / "stackoverflow.sqlite"
    write_stackoverflow_sqlite(so, {"train": {"00000001": [_POST]}, "test": {"00000002": [_POST]}})
    with sqlite3.connect(so) as connection:
        connection.execute("DELETE FROM client_metadata WHERE split_name = 'test'")
    connection.close()
    code, out = invoke("verify", str(so))
    assert code == 1, out
    assert "split test has no clients: a run that reads it refuses the file" in out
    with sqlite3.connect(so) as connection:
        connection.execute("INSERT INTO client_metadata VALUES ('00000002', 'heldout', 1)")
    connection.close()
    code, out = invoke("verify", str(so))
    assert code == 1 and "example rows of split(s) ['test'] have no client_metadata" in out, out


def test_verify_errors(tmp_path: Path) -> None:
    code, out = invoke("verify", str(tmp_path / "nowhere"))
    assert code == 2 and "error:" in out
    code, out = invoke("verify", str(tmp_path))
    assert code == 1 and "no dataset files" in out


def test_download_command(server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # noqa: F811
    body = tar_bz2({"stackoverflow.tag_count": json.dumps({"html": 3}).encode()})
    digest = hashlib.sha256(body).hexdigest()
    serve_registry_file(server, monkeypatch, "stackoverflow.tag_count.tar.bz2", body, digest)
    code, out = invoke("download", "stackoverflow.tag_count.tar.bz2", "--dir", str(tmp_path))
    assert code == 0, out
    assert f"SHA-256 {digest}" in out
    assert str(tmp_path / "stackoverflow.tag_count") in out
    assert json.loads((tmp_path / "stackoverflow.tag_count").read_text()) == {"html": 3}
    code, out = invoke("verify", str(tmp_path))
    assert code == 0, out
    assert f"checksum: matches (SHA-256 {digest})" in out and "2 of 2 file(s) ok" in out


def test_download_command_errors(tmp_path: Path) -> None:
    code, out = invoke("download", "mnist.tar.bz2", "--dir", str(tmp_path))
    assert code == 2 and "error:" in out and "known files: fed_emnist.tar.bz2" in out
    code, out = invoke("download", "fed_emnist.tar.bz2", "--dir", str(tmp_path), "--url", closed_port_url())
    assert code == 2 and "error:" in out and "Manual alternative" in out and f"fedpub data verify {tmp_path}" in out
    assert REGISTRY["fed_emnist.tar.bz2"].sha256 is not None


def test_export_user_writes_a_device_folder_that_reads_back_as_the_user(emnist_dir: Path, tmp_path: Path) -> None:
    from fedpub.config import parse_config
    from fedpub.data.device_user import load_device_user

    train, _ = load_emnist_split(emnist_dir, only_digits=True)
    cid = train.client_ids[0]
    result = runner.invoke(data_app, ["export-user", str(train.path), cid, str(tmp_path / "me")])
    assert result.exit_code == 0, result.output
    user = load_device_user(tmp_path / "me", parse_config({"data": {"source": "emnist_h5"}}), client_id=cid)
    assert np.array_equal(user.data.client_data(cid).x.numpy(), train.client_data(cid).x.numpy())
    again = runner.invoke(data_app, ["export-user", str(train.path), cid, str(tmp_path / "me")])
    assert again.exit_code == 2 and "exists and is not empty" in again.output
    unknown = runner.invoke(data_app, ["export-user", str(train.path), "nobody", str(tmp_path / "x")])
    assert unknown.exit_code == 2 and "nobody" in unknown.output
