"""How a dataset declares its downloadable files: where each is (TFF's public bucket, FedML's S3 mirror where it holds
the file), its SHA-256 digest as TFF's loaders check it, and what an archive holds.

Declarations only (standard library): :mod:`fedpub.data.download` fetches, verifies and extracts them, and
``fedpub data verify`` compares a file on disk with its digest.
"""

from __future__ import annotations

from dataclasses import dataclass

TFF_BASE = "https://storage.googleapis.com/tff-datasets-public"
FEDML_BASE = "https://fedml.s3-us-west-1.amazonaws.com"


@dataclass(frozen=True)
class Sha256:
    """A SHA-256 digest (64 hex digits), or only its first and last digits where that is all that is published."""

    prefix: str
    suffix: str = ""

    @property
    def complete(self) -> bool:
        return len(self.prefix) == 64

    def matches(self, digest: str) -> bool:
        return len(digest) == 64 and digest.startswith(self.prefix) and digest.endswith(self.suffix)

    def __str__(self) -> str:
        return self.prefix if self.complete else f"{self.prefix}…{self.suffix}"


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file: where it is (first URL first, then mirrors), its digest, what an archive holds."""

    name: str
    urls: tuple[str, ...]
    sha256: Sha256 | None
    members: tuple[str, ...] = ()  # files a .tar.bz2 extracts to

    @property
    def is_archive(self) -> bool:
        return self.name.endswith(".tar.bz2")

    def checksum_note(self) -> str:
        """How a download of this file is checked, in words."""
        if self.sha256 is None:
            return "no published SHA-256: checked by size and format only"
        if not self.sha256.complete:
            return f"only part of its SHA-256 is published ({self.sha256}): the first and last digits are compared"
        return f"SHA-256 {self.sha256}"


def tff_file(name: str, sha256: Sha256 | None, *, mirror: bool, members: tuple[str, ...] = ()) -> RemoteFile:
    """File ``name`` of TFF's public bucket, and of FedML's mirror when ``mirror``."""
    urls = (f"{TFF_BASE}/{name}",) + ((f"{FEDML_BASE}/{name}",) if mirror else ())
    return RemoteFile(name=name, urls=urls, sha256=sha256, members=members)
