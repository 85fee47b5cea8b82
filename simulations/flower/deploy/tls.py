"""The secrets of a local deployment over TLS: a self-signed CA and the SuperLink's server certificate
(``openssl``), and each SuperNode's authentication key pair (``ssh-keygen``).
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fedpub.simulations.flower.deploy.processes import LOCALHOST, DeploymentError, run_tool


@dataclass(frozen=True)
class TlsFiles:
    """A CA's certificate and key, and a server certificate it signed with the server's key."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path


def make_tls_certificates(
    directory: Path, hosts: Sequence[str] = (LOCALHOST, "localhost"), days: int = 365
) -> TlsFiles:
    """A self-signed CA and a server certificate it signs, valid for ``hosts`` (IPs and DNS
    names become subjectAltName entries), made with ``openssl``."""
    if shutil.which("openssl") is None:
        raise DeploymentError("openssl is needed for --tls")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    server_key, server_csr, server_cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ext = directory / "server.ext"
    san = ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in hosts)
    ext.write_text(
        f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    run_tool(["openssl", "genrsa", "-out", str(ca_key), "2048"])
    run_tool(["openssl", "req", "-x509", "-new", "-key", str(ca_key), "-sha256", "-days", str(days),
               "-subj", "/CN=fedpub local CA", "-out", str(ca_cert)])
    run_tool(["openssl", "genrsa", "-out", str(server_key), "2048"])
    run_tool(["openssl", "req", "-new", "-key", str(server_key), "-subj", f"/CN={hosts[0]}",
               "-out", str(server_csr)])
    run_tool(["openssl", "x509", "-req", "-in", str(server_csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
               "-CAcreateserial", "-days", str(days), "-sha256", "-extfile", str(ext), "-out", str(server_cert)])
    return TlsFiles(ca_cert, ca_key, server_cert, server_key)


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class NodeKey:
    """A SuperNode's key pair: the private key it signs with, the public key registered with the SuperLink."""

    private: Path
    public: Path


def make_node_key(directory: Path, name: str) -> NodeKey:
    """An ECDSA P-384 key pair for SuperNode authentication (``ssh-keygen``; no passphrase)."""
    if shutil.which("ssh-keygen") is None:
        raise DeploymentError("ssh-keygen is needed for SuperNode authentication")
    directory.mkdir(parents=True, exist_ok=True)
    private = directory / name
    for path in (private, private.with_name(name + ".pub")):
        path.unlink(missing_ok=True)
    run_tool(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", name, "-f", str(private)])
    return NodeKey(private, private.with_name(name + ".pub"))
