"""Downloads against a local HTTP server (with Range support): complete, resumed, verified, safely extracted."""

from __future__ import annotations

import hashlib
import io
import lzma
import re
import socket
import sqlite3
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fedpub.data.base import DatasetError
from fedpub.data import download as dl
from fedpub.data.download import REGISTRY, download, extract_tar_bz2
from fedpub.data.remote_files import RemoteFile


@dataclass
class FileServer:
    """What the local server serves and what it saw."""

    url: str
    files: dict[str, bytes] = field(default_factory=dict)
    honour_range: bool = True
    cut_next_after: int | None = None  # send only this many bytes of the next body, then hang up
    requests: list[tuple[str, str | None]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        state: FileServer = self.server.state  # type: ignore[attr-defined]
        state.requests.append((self.path, self.headers.get("Range")))
        body = state.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if match and state.honour_range:
            start = int(match.group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        payload = body[start:]
        if state.cut_next_after is not None:
            payload, state.cut_next_after = payload[: state.cut_next_after], None
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[FileServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    state = FileServer(url=f"http://127.0.0.1:{httpd.server_address[1]}")
    httpd.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/fed_emnist.tar.bz2"


def tar_bz2(members: dict[str, bytes], *, symlink: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if symlink is not None:
            link = tarfile.TarInfo(symlink)
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(link)
    return buffer.getvalue()


def _incompressible(n_blocks: int, salt: bytes) -> bytes:
    return b"".join(hashlib.sha256(salt + i.to_bytes(4, "little")).digest() for i in range(n_blocks))


MEMBERS = {"fed_emnist_train.h5": _incompressible(3000, b"train"), "fed_emnist_test.h5": _incompressible(300, b"test")}


def serve_registry_file(
    server: FileServer,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    body: bytes,
    sha256: str | None,
    *,
    mirrors: int = 0,
) -> RemoteFile:
    """Serve ``body`` as registry file ``name``, whose registry entry points at the local server."""
    server.files[f"/{name}"] = body
    urls = tuple(f"{server.url}/missing{i}/{name}" for i in range(mirrors)) + (f"{server.url}/{name}",)
    entry = RemoteFile(name=name, urls=urls, sha256=sha256, members=REGISTRY[name].members)
    monkeypatch.setitem(REGISTRY, name, entry)
    return entry


def test_registry_matches_the_reference() -> None:
    names = set(REGISTRY)
    assert names >= {
        "fed_emnist.tar.bz2",
        "fed_emnist_digitsonly.tar.bz2",
        "emnist_all.sqlite.lzma",
        "stackoverflow.tar.bz2",
        "stackoverflow.word_count.tar.bz2",
        "stackoverflow.tag_count.tar.bz2",
        "stackoverflow.sqlite.lzma",
    }
    # In full, as TFF passes them to tf.keras.utils.get_file(file_hash=...) (stackoverflow.py load_word_counts and
    # load_tag_counts; emnist.py and stackoverflow.py before commit 7bb20162f for the HDF5 archives).
    assert {name: REGISTRY[name].sha256 for name in names & {
        "fed_emnist.tar.bz2", "fed_emnist_digitsonly.tar.bz2", "emnist_all.sqlite.lzma", "stackoverflow.tar.bz2",
        "stackoverflow.word_count.tar.bz2", "stackoverflow.tag_count.tar.bz2", "stackoverflow.sqlite.lzma",
    }} == {
        "fed_emnist.tar.bz2": "fe1ed5a502cea3a952eb105920bff8cffb32836b5173cb18a57a32c3606f3ea0",
        "fed_emnist_digitsonly.tar.bz2": "55333deb8546765427c385710ca5e7301e16f4ed8b60c1dc5ae224b42bd5b14b",
        "emnist_all.sqlite.lzma": None,  # TFF's download.get_compressed_file checks no digest
        "stackoverflow.tar.bz2": "99eca2f8b8327a09e5fc123979df2d237acbc5e52322f6d86bf523ee47b961a2",
        "stackoverflow.word_count.tar.bz2": "1dc00256d6e527c54b9756d968118378ae14e6692c0b3b6cad470cdd3f0c519c",
        "stackoverflow.tag_count.tar.bz2": "6fe281cec490d9384a290d560072438e7e2b377bbb823876ce7bd6f82696772d",
        "stackoverflow.sqlite.lzma": None,
    }
    assert REGISTRY["fed_emnist.tar.bz2"].urls == (
        "https://storage.googleapis.com/tff-datasets-public/fed_emnist.tar.bz2",
        "https://fedml.s3-us-west-1.amazonaws.com/fed_emnist.tar.bz2",
    )
    assert REGISTRY["stackoverflow.word_count.tar.bz2"].checksum_note() == (
        "SHA-256 1dc00256d6e527c54b9756d968118378ae14e6692c0b3b6cad470cdd3f0c519c"
    )
    assert "size and format only" in REGISTRY["emnist_all.sqlite.lzma"].checksum_note()
    for entry in REGISTRY.values():
        assert all(u.startswith("https://") and u.endswith("/" + entry.name) for u in entry.urls)
        assert entry.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", entry.sha256)
        assert bool(entry.members) == entry.is_archive


def test_unknown_name_lists_the_registry(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"unknown dataset file 'emnist'.*fed_emnist\.tar\.bz2, "):
        download("emnist", tmp_path)


def test_complete_download_verifies_and_extracts(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    body = tar_bz2(MEMBERS)
    serve_registry_file(server, monkeypatch, "fed_emnist.tar.bz2", body, hashlib.sha256(body).hexdigest())
    calls: list[tuple[int, int | None]] = []
    files = download("fed_emnist.tar.bz2", tmp_path / "data", progress=lambda d, t: calls.append((d, t)))
    assert files == [tmp_path / "data" / name for name in MEMBERS]
    assert all(p.read_bytes() == MEMBERS[p.name] for p in files)
    assert (tmp_path / "data" / "fed_emnist.tar.bz2").read_bytes() == body
    assert not (tmp_path / "data" / "fed_emnist.tar.bz2.part").exists()
    assert calls[0] == (0, len(body)) and calls[-1] == (len(body), len(body))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert server.requests == [("/fed_emnist.tar.bz2", None)]


def test_resume_after_partial_part_file(server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    body = tar_bz2(MEMBERS)
    serve_registry_file(server, monkeypatch, "fed_emnist.tar.bz2", body, hashlib.sha256(body).hexdigest())
    (tmp_path / "fed_emnist.tar.bz2.part").write_bytes(body[:1000])
    calls: list[tuple[int, int | None]] = []
    download("fed_emnist.tar.bz2", tmp_path, progress=lambda d, t: calls.append((d, t)))
    assert server.requests == [("/fed_emnist.tar.bz2", "bytes=1000-")]
    assert calls[0] == (1000, len(body))
    assert (tmp_path / "fed_emnist.tar.bz2").read_bytes() == body


def test_interrupted_download_keeps_part_and_resumes(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    body = tar_bz2(MEMBERS)
    serve_registry_file(server, monkeypatch, "fed_emnist.tar.bz2", body, hashlib.sha256(body).hexdigest())
    server.cut_next_after = 700
    with pytest.raises(DatasetError, match=r"after 700 of \d+ bytes; run again to resume"):
        download("fed_emnist.tar.bz2", tmp_path)
    assert (tmp_path / "fed_emnist.tar.bz2.part").stat().st_size == 700
    assert not (tmp_path / "fed_emnist.tar.bz2").exists()
    download("fed_emnist.tar.bz2", tmp_path)
    assert server.requests[-1] == ("/fed_emnist.tar.bz2", "bytes=700-")
    assert (tmp_path / "fed_emnist.tar.bz2").read_bytes() == body


def test_server_ignoring_range_restarts_cleanly(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    body = tar_bz2(MEMBERS)
    serve_registry_file(server, monkeypatch, "fed_emnist.tar.bz2", body, hashlib.sha256(body).hexdigest())
    server.honour_range = False
    (tmp_path / "fed_emnist.tar.bz2.part").write_bytes(b"junk" * 100)
    download("fed_emnist.tar.bz2", tmp_path)
    assert (tmp_path / "fed_emnist.tar.bz2").read_bytes() == body


def test_complete_part_file_gets_416_and_is_verified(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    body = tar_bz2(MEMBERS)
    serve_registry_file(server, monkeypatch, "fed_emnist.tar.bz2", body, hashlib.sha256(body).hexdigest())
    (tmp_path / "fed_emnist.tar.bz2.part").write_bytes(body)
    download("fed_emnist.tar.bz2", tmp_path)
    assert (tmp_path / "fed_emnist.tar.bz2").read_bytes() == body


def test_checksum_mismatch_leaves_no_file(server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    body = tar_bz2(MEMBERS)
    serve_registry_file(server, monkeypatch, "fed_emnist.tar.bz2", body, "0" * 64)
    with pytest.raises(DatasetError, match=r"fed_emnist\.tar\.bz2 from http://127\.0\.0\.1:\d+/fed_emnist\.tar\.bz2: "
                       r"SHA-256 [0-9a-f]{64} does not match the expected 0{64}; the download was deleted"):
        download("fed_emnist.tar.bz2", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_count_files_are_checked_against_their_full_digest(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    body = tar_bz2({"stackoverflow.word_count": b". 342309\nthe 341937\n"})
    digest = hashlib.sha256(body).hexdigest()
    wrong_middle = digest[:8] + ("0" if digest[8] != "0" else "1") + digest[9:]  # the same first and last digits
    serve_registry_file(server, monkeypatch, "stackoverflow.word_count.tar.bz2", body, wrong_middle)
    with pytest.raises(DatasetError, match=f"does not match the expected {wrong_middle}"):
        download("stackoverflow.word_count.tar.bz2", tmp_path)
    serve_registry_file(server, monkeypatch, "stackoverflow.word_count.tar.bz2", body, digest)
    assert download("stackoverflow.word_count.tar.bz2", tmp_path) == [tmp_path / "stackoverflow.word_count"]


def test_mirror_is_tried_after_a_failing_url(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    body = tar_bz2(MEMBERS)
    sha = hashlib.sha256(body).hexdigest()
    serve_registry_file(server, monkeypatch, "fed_emnist.tar.bz2", body, sha, mirrors=1)
    download("fed_emnist.tar.bz2", tmp_path)
    assert [path for path, _ in server.requests] == ["/missing0/fed_emnist.tar.bz2", "/fed_emnist.tar.bz2"]


def test_unreachable_host_explains_the_manual_alternative(tmp_path: Path) -> None:
    url = closed_port_url()
    with pytest.raises(DatasetError) as caught:
        download("fed_emnist.tar.bz2", tmp_path, url=url, timeout=5)
    message = str(caught.value)
    assert f"could not download fed_emnist.tar.bz2 ({url}: " in message
    assert "refused" in message.lower()
    assert "Manual alternative: download fed_emnist.tar.bz2 on a machine with internet access" in message
    assert "https://storage.googleapis.com/tff-datasets-public/fed_emnist.tar.bz2" in message
    assert f"copy it into {tmp_path}, then run `fedpub data verify {tmp_path}`" in message
    assert not (tmp_path / "fed_emnist.tar.bz2").exists()


def test_http_error_is_reported_per_url(server: FileServer, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"/nothing\.tar\.bz2: HTTP 404"):
        download("fed_emnist.tar.bz2", tmp_path, url=f"{server.url}/nothing.tar.bz2")


def test_existing_verified_file_needs_no_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = tar_bz2(MEMBERS)
    sha = hashlib.sha256(body).hexdigest()
    entry = RemoteFile("fed_emnist.tar.bz2", (closed_port_url(),), sha, tuple(MEMBERS))
    monkeypatch.setitem(REGISTRY, entry.name, entry)
    (tmp_path / entry.name).write_bytes(body)
    assert download(entry.name, tmp_path) == [tmp_path / name for name in MEMBERS]
    (tmp_path / entry.name).write_bytes(body + b"x")
    with pytest.raises(DatasetError, match="already there but its SHA-256 does not match"):
        download(entry.name, tmp_path)


def _sqlite_bytes(tmp_path: Path) -> bytes:
    path = tmp_path / "scratch.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE t (x)")
    connection.close()
    return path.read_bytes()


def test_lzma_without_checksum_is_checked_by_size_and_format(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    good = lzma.compress(_sqlite_bytes(tmp_path), format=lzma.FORMAT_ALONE)
    serve_registry_file(server, monkeypatch, "emnist_all.sqlite.lzma", good, None)
    out = tmp_path / "out"
    assert download("emnist_all.sqlite.lzma", out) == [out / "emnist_all.sqlite.lzma"]
    assert (out / "emnist_all.sqlite.lzma").read_bytes() == good

    serve_registry_file(server, monkeypatch, "stackoverflow.sqlite.lzma", lzma.compress(b"not sqlite" * 10), None)
    with pytest.raises(DatasetError, match="not a SQLite database.*the download was deleted"):
        download("stackoverflow.sqlite.lzma", out)
    serve_registry_file(server, monkeypatch, "stackoverflow.sqlite.lzma", b"plain bytes" * 10, None)
    with pytest.raises(DatasetError, match="is not an lzma/xz file.*the download was deleted"):
        download("stackoverflow.sqlite.lzma", out)
    assert sorted(p.name for p in out.iterdir()) == ["emnist_all.sqlite.lzma"]
    (out / "stackoverflow.sqlite.lzma").write_bytes(b"copied by hand, wrongly")
    with pytest.raises(DatasetError, match=r"stackoverflow\.sqlite\.lzma is not an lzma/xz file"):
        download("stackoverflow.sqlite.lzma", out)


@pytest.mark.parametrize(
    ("members", "symlink", "message"),
    [
        ({"../evil.txt": b"x"}, None, r"'\.\./evil\.txt', a path outside the target directory"),
        ({"sub/../../evil.txt": b"x"}, None, r"a path outside the target directory"),
        ({"/tmp/evil.txt": b"x"}, None, r"'/tmp/evil\.txt', a path outside the target directory"),
        ({}, "fed_emnist_train.h5", r"not a regular file or folder \(a link or device\)"),
    ],
)
def test_unsafe_archive_members_are_refused(tmp_path: Path, members: dict, symlink: str | None, message: str) -> None:
    archive = tmp_path / "a" / "evil.tar.bz2"
    archive.parent.mkdir()
    archive.write_bytes(tar_bz2({"fine.txt": b"ok", **members}, symlink=symlink))
    with pytest.raises(DatasetError, match=message):
        extract_tar_bz2(archive, tmp_path / "a" / "out")
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "a" / "out" / "fine.txt").exists()
    with pytest.raises(DatasetError, match=message):
        dl.check_tar_bz2(archive)


def test_unsafe_download_is_refused_after_verification(
    server: FileServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    body = tar_bz2({"../escape.h5": b"x"})
    serve_registry_file(server, monkeypatch, "fed_emnist.tar.bz2", body, hashlib.sha256(body).hexdigest())
    with pytest.raises(DatasetError, match="outside the target directory: refused"):
        download("fed_emnist.tar.bz2", tmp_path / "d")
    assert not (tmp_path / "escape.h5").exists()


def test_corrupt_archive(tmp_path: Path) -> None:
    archive = tmp_path / "broken.tar.bz2"
    archive.write_bytes(tar_bz2(MEMBERS)[:200])
    with pytest.raises(DatasetError, match=r"broken\.tar\.bz2 is not a readable \.tar\.bz2 archive"):
        extract_tar_bz2(archive, tmp_path / "out")
