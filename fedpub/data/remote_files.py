"""How a dataset declares its downloadable files: where each is (TFF's public bucket, FedML's S3 mirror where it holds
the file), its SHA-256 digest in full as TFF's loaders check it, and what an archive holds.

Declarations only (standard library): :mod:`fedpub.data.download` fetches, verifies and extracts them, and
``fedpub data verify`` compares a file on disk with its digest.
"""

from __future__ import annotations

from dataclasses import dataclass

TFF_BASE = "https://storage.googleapis.com/tff-datasets-public"
FEDML_BASE = "https://fedml.s3-us-west-1.amazonaws.com"


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file: where it is (first URL first, then mirrors), its digest, what an archive holds."""

    name: str
    urls: tuple[str, ...]
    sha256: str | None  # 64 hex digits, as TFF publishes it; None where TFF publishes none
    members: tuple[str, ...] = ()  # files a .tar.bz2 extracts to

    @property
    def is_archive(self) -> bool:
        return self.name.endswith(".tar.bz2")

    def checksum_note(self) -> str:
        """How a download of this file is checked, in words."""
        if self.sha256 is None:
            return "no published SHA-256: checked by size and format only"
        return f"SHA-256 {self.sha256}"


def tff_file(name: str, sha256: str | None, *, mirror: bool, members: tuple[str, ...] = ()) -> RemoteFile:
    """File ``name`` of TFF's public bucket, and of FedML's mirror when ``mirror``."""
    urls = (f"{TFF_BASE}/{name}",) + ((f"{FEDML_BASE}/{name}",) if mirror else ())
    return RemoteFile(name=name, urls=urls, sha256=sha256, members=members)
