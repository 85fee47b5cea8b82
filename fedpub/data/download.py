"""TFF's public federated dataset files: resumable verified downloads, safe extraction, lzma caching.

Which files there are, where, and their SHA-256 digests is each dataset's declaration
(:mod:`fedpub.data.remote_files`, gathered by :mod:`fedpub.data.registry`): the URLs and the digests TFF's loaders
pass to ``tf.keras.utils.get_file(file_hash=...)``, in full, with FedML's S3 mirror where it holds the file. TFF
publishes no digest for the ``.sqlite.lzma`` files (``download.get_compressed_file`` checks none), so a download of
one is checked by size and format only. ``.lzma`` files are decompressed the way ``get_compressed_file`` does it:
streamed through ``lzma.LZMADecompressor``.

Downloads go to ``<name>.part`` (resumed with an HTTP ``Range`` request when present) and are renamed to the final
name only after the checksum matched; archives are extracted member by member after every member was checked to be
a regular file or folder inside the target directory.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import re
import shutil
import tarfile
from collections.abc import Callable
from http.client import HTTPException
from pathlib import Path, PurePosixPath
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from fedpub.atomic import atomic_path
from fedpub.data import registry
from fedpub.data.base import DatasetError
from fedpub.data.remote_files import RemoteFile

CHUNK = 1 << 20
SQLITE_HEADER = b"SQLite format 3\x00"

ProgressCallback = Callable[[int, "int | None"], None]
"""Called as ``progress(bytes_done, bytes_total)`` while downloading; the total is None when the server omits it."""


REGISTRY: dict[str, RemoteFile] = registry.remote_files()
"""Every registered dataset's downloadable files, by name."""


def registry_entry(name: str) -> RemoteFile:
    """The registry entry of file ``name``; a DatasetError lists the known names."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise DatasetError(f"unknown dataset file {name!r}; known files: {', '.join(REGISTRY)}") from None


def sha256_of(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def check_lzma_sqlite_header(path: str | os.PathLike[str]) -> None:
    """Check that ``path`` is an lzma/xz stream whose decompressed content starts like a SQLite database."""
    try:
        with open(path, "rb") as f:
            head = lzma.LZMADecompressor().decompress(f.read(1 << 16), max_length=len(SQLITE_HEADER))
    except lzma.LZMAError as exc:
        raise DatasetError(f"{path} is not an lzma/xz file: {exc}") from None
    if not head.startswith(SQLITE_HEADER):
        raise DatasetError(f"{path} decompresses to something that is not a SQLite database (starts {head[:16]!r})")


def ensure_decompressed(
    path: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    prepare: Callable[[Path], None] | None = None,
) -> Path:
    """Decompress ``X.lzma`` once to ``X`` (beside it, or in ``cache_dir``), atomically; returns the cache path.

    The cache is reused while it is at least as new as the compressed file; a compressed file that is gone is not
    needed when its cache is there. ``prepare`` is called on the complete copy under its temporary name, before it
    is renamed into place (the SQLite readers index it there, so no reader ever sees it half done).
    """
    source = Path(path)
    target = Path(cache_dir if cache_dir is not None else source.parent) / source.name.removesuffix(".lzma")
    if target.is_file() and (not source.exists() or target.stat().st_mtime >= source.stat().st_mtime):
        return target
    if not source.is_file():
        raise DatasetError(f"{source} does not exist (nor its decompressed copy {target})")
    decompressor = lzma.LZMADecompressor()
    with open(source, "rb") as src, atomic_path(target) as tmp, open(tmp, "wb") as dst:
        while not decompressor.eof and (chunk := src.read(CHUNK)):
            try:
                dst.write(decompressor.decompress(chunk))
            except lzma.LZMAError as exc:
                raise DatasetError(f"{source} is not a valid lzma/xz file (corrupt?): {exc}") from None
        if not decompressor.eof:
            raise DatasetError(f"{source} ends before its lzma stream does (truncated download?)")
        dst.close()
        if prepare is not None:
            prepare(tmp)
    return target


# ---------------------------------------------------------------------------------------------------------------
# Extraction.


def _safe_member(member: tarfile.TarInfo, archive: Path, root: Path) -> Path | None:
    """Where a member goes under ``root`` (None for a folder); a DatasetError for anything unsafe."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts or "\\" in member.name or not name.parts:
        raise DatasetError(f"{archive} holds {member.name!r}, a path outside the target directory: refused")
    if not (member.isfile() or member.isdir()):
        raise DatasetError(
            f"{archive} holds {member.name!r}, which is not a regular file or folder (a link or device): refused"
        )
    target = root.joinpath(*name.parts)
    if not target.resolve().is_relative_to(root.resolve()):
        raise DatasetError(f"{archive} holds {member.name!r}, which resolves outside {root}: refused")
    return target if member.isfile() else None


def check_tar_bz2(archive: str | os.PathLike[str]) -> list[tuple[str, int]]:
    """(name, size) of the regular files of a ``.tar.bz2``, after checking every member as extraction would."""
    archive = Path(archive)
    try:
        with tarfile.open(archive, "r:bz2") as tar:
            members = tar.getmembers()
    except (tarfile.TarError, EOFError) as exc:
        raise DatasetError(f"{archive} is not a readable .tar.bz2 archive (corrupt or truncated?): {exc}") from None
    return [(m.name, m.size) for m in members if _safe_member(m, archive, archive.parent) is not None]


def extract_tar_bz2(archive: str | os.PathLike[str], directory: str | os.PathLike[str]) -> list[Path]:
    """Extract the regular files of a ``.tar.bz2`` into ``directory``; returns them in archive order.

    Every member is checked before anything is written: absolute paths, ``..``, links and devices are refused.
    Each file is written under a temporary name and renamed into place when complete.
    """
    archive, root = Path(archive), Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        with tarfile.open(archive, "r:bz2") as tar:
            members = tar.getmembers()
            targets = [(m, _safe_member(m, archive, root)) for m in members]
            for member, target in targets:
                if target is None:
                    continue
                source = tar.extractfile(member)
                assert source is not None  # a regular file always has content
                with source, atomic_path(target) as tmp, open(tmp, "wb") as out:
                    shutil.copyfileobj(source, out, CHUNK)
                written.append(target)
    except (tarfile.TarError, EOFError) as exc:
        raise DatasetError(f"{archive} is not a readable .tar.bz2 archive (corrupt or truncated?): {exc}") from None
    return written


# ---------------------------------------------------------------------------------------------------------------
# Download.


class _FetchError(Exception):
    """One URL could not be fetched (network, HTTP status, or a connection that closed early)."""


def _total_from_content_range(value: str | None, offset: int) -> int | None:
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", (value or "").strip())
    if match is None or int(match.group(1)) != offset:
        raise _FetchError(f"the server answered the resume request with Content-Range {value!r}")
    return None if match.group(3) == "*" else int(match.group(3))


def _fetch(url: str, part: Path, progress: ProgressCallback | None, timeout: float) -> None:
    """Append the rest of ``url`` to ``part`` (or write it whole when the server ignores the Range)."""
    offset = part.stat().st_size if part.is_file() else 0
    headers = {"User-Agent": "fedpub"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urlopen(Request(url, headers=headers), timeout=timeout)
    except HTTPError as exc:
        if exc.code == 416 and offset:
            return  # nothing past what we have: the checksum decides whether the .part is the whole file
        raise _FetchError(f"HTTP {exc.code} {exc.reason}") from None
    except (URLError, OSError, HTTPException) as exc:
        raise _FetchError(str(getattr(exc, "reason", exc))) from None
    with response:
        if offset and response.status == 206:
            total = _total_from_content_range(response.headers.get("Content-Range"), offset)
            mode = "ab"
        else:
            offset, mode = 0, "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length is not None and length.isdigit() else None
        done = offset
        if progress is not None:
            progress(done, total)
        with open(part, mode) as out:
            while True:
                try:
                    chunk = response.read(CHUNK)
                except (OSError, HTTPException) as exc:
                    raise _FetchError(f"connection lost after {done} bytes ({exc}); run again to resume") from None
                if not chunk:
                    break
                out.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
    if total is not None and done != total:
        raise _FetchError(f"connection closed after {done} of {total} bytes; run again to resume")


def _check_download(entry: RemoteFile, path: Path, source: str) -> None:
    """The digest (or, without one, the format) of a finished download; a mismatch deletes it."""
    if entry.sha256 is not None:
        digest = sha256_of(path)
        if digest != entry.sha256:
            path.unlink()
            raise DatasetError(
                f"{entry.name} from {source}: SHA-256 {digest} does not match the expected {entry.sha256}; "
                "the download was deleted"
            )
    elif entry.name.endswith(".sqlite.lzma"):
        try:
            check_lzma_sqlite_header(path)
        except DatasetError as exc:
            path.unlink()
            raise DatasetError(f"{entry.name} from {source}: {exc}; the download was deleted") from None


def _manual_alternative(entry: RemoteFile, root: Path, failures: list[str]) -> DatasetError:
    tried = "; ".join(failures)
    extract = (
        f"; then `fedpub data download {entry.name} --dir {root}` extracts it without downloading again"
        if entry.is_archive
        else ""
    )
    return DatasetError(
        f"could not download {entry.name} ({tried}). Manual alternative: download {entry.name} on a machine "
        f"with internet access (from {' or '.join(entry.urls)}), copy it into {root}, then run "
        f"`fedpub data verify {root}`{extract}"
    )


def download(
    name: str,
    directory: str | os.PathLike[str],
    *,
    url: str | None = None,
    progress: ProgressCallback | None = None,
    timeout: float = 60.0,
) -> list[Path]:
    """Download registry file ``name`` into ``directory``, verify it, and extract it if it is an archive.

    ``url`` replaces the registry's URLs (a local mirror); otherwise the URLs are tried in order. A final file that
    is already there and verifies is reused without any network access. Returns the files produced: the archive's
    members for a ``.tar.bz2``, else the downloaded file. Raises :class:`DatasetError` when no URL could be
    fetched (the message names each URL, why it failed, and the manual alternative) or the checksum does not match.
    """
    entry = registry_entry(name)
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / entry.name
    if final.is_file():
        if entry.sha256 is not None and sha256_of(final) != entry.sha256:
            raise DatasetError(
                f"{final} is already there but its SHA-256 does not match the expected {entry.sha256}; "
                "delete it to download it again"
            )
        if entry.sha256 is None and entry.name.endswith(".sqlite.lzma"):
            check_lzma_sqlite_header(final)
    else:
        part = root / f"{entry.name}.part"
        failures = []
        for candidate in (url,) if url is not None else entry.urls:
            try:
                _fetch(candidate, part, progress, timeout)
            except _FetchError as exc:
                failures.append(f"{candidate}: {exc}")
                continue
            _check_download(entry, part, candidate)
            os.replace(part, final)
            break
        else:
            raise _manual_alternative(entry, root, failures)
    return extract_tar_bz2(final, root) if entry.is_archive else [final]
