"""A user id bound to a device's key: the server's registry of users and the proof a node gives in discovery.

The **registry** (``flower.user_registry``, a YAML file; docs/deployment.md) maps each user id to its public flag
and the public key of the node that holds it (the OpenSSH line of the ``.pub`` file whose private half the node
also gives ``flower-supernode --auth-supernode-private-key``)::

    users:
      f0000_14: {public: false, key: "ecdsa-sha2-nistp384 AAAA... node-14"}
      f0001_02: {public: true, key: "ecdsa-sha2-nistp384 AAAA... node-2"}

In discovery the server sends a fresh random nonce; a node answers with its user id and an ECDSA (SHA-256)
signature of (nonce, user id) made with its private key; the server checks it against the registered key. A
signature is good for one discovery only (the nonce is never reused), so an old answer cannot be replayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedpub.strict_yaml import load_yaml

DOMAIN = b"fedpub node identity\0"
"""Prefixed to what a node signs, so the signature means nothing to any other protocol using the same key."""


class IdentityError(ValueError):
    """A registry or key file that cannot be used, or a claim that does not hold; the message says which."""


def signed_message(nonce: bytes, client_id: str) -> bytes:
    """What a node signs: the domain, the server's nonce and the user id."""
    return DOMAIN + len(nonce).to_bytes(2, "big") + nonce + client_id.encode("utf-8")


def load_private_key(path: str | Path) -> ec.EllipticCurvePrivateKey:
    """An EC private key, in OpenSSH (``ssh-keygen -t ecdsa``) or PEM form, without passphrase."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IdentityError(f"the node's private key {path} cannot be read: {exc}") from None
    loader = serialization.load_ssh_private_key if b"OPENSSH" in data else serialization.load_pem_private_key
    try:
        key = loader(data, password=None)
    except (ValueError, TypeError) as exc:
        raise IdentityError(f"{path} is not an unencrypted OpenSSH or PEM private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise IdentityError(f"{path} is a {type(key).__name__}; expected an EC key (ssh-keygen -t ecdsa -b 384)")
    return key


def sign_identity(key: ec.EllipticCurvePrivateKey, nonce: bytes, client_id: str) -> bytes:
    """The node's proof that it holds ``key`` and claims ``client_id`` in the discovery of ``nonce``."""
    return key.sign(signed_message(nonce, client_id), ec.ECDSA(hashes.SHA256()))


@dataclass(frozen=True)
class RegisteredUser:
    public: bool
    key: ec.EllipticCurvePublicKey


@dataclass(frozen=True)
class UserRegistry:
    """User id → its public flag and its node's public key, read from ``path``."""

    path: Path
    users: dict[str, RegisteredUser]

    @classmethod
    def load(cls, path: str | Path) -> UserRegistry:
        path = Path(path)
        try:
            raw = load_yaml(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise IdentityError(f"the user registry {path} cannot be read: {exc}") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("users"), dict):
            raise IdentityError(f"{path}: expected a mapping `users:` of user id -> {{public: bool, key: str}}")
        users = {}
        for cid, entry in raw["users"].items():
            if not isinstance(entry, dict) or not isinstance(entry.get("public"), bool) or set(entry) != {
                "public", "key"
            }:
                raise IdentityError(f"{path}: user {cid}: expected {{public: true|false, key: \"ecdsa-sha2-... \"}}")
            try:
                key = serialization.load_ssh_public_key(str(entry["key"]).encode())
            except (ValueError, TypeError) as exc:
                raise IdentityError(f"{path}: user {cid}: `key` is not an OpenSSH public key line: {exc}") from None
            if not isinstance(key, ec.EllipticCurvePublicKey):
                raise IdentityError(f"{path}: user {cid}: `key` is not an EC (ecdsa-sha2-*) key")
            if str(cid) in users:
                raise IdentityError(f"{path}: two entries of `users` are one user id once read as text (such as 7 "
                                    "and '7'): give each user once")
            users[str(cid)] = RegisteredUser(entry["public"], key)
        return cls(path, users)

    def verify(self, client_id: str, nonce: bytes, signature: bytes | None) -> RegisteredUser:
        """The registered user ``client_id`` if ``signature`` proves its key; raises IdentityError saying why not."""
        user = self.users.get(client_id)
        if user is None:
            raise IdentityError(f"user {client_id} is not in the registry {self.path}")
        if not signature:
            raise IdentityError(
                f"no signature for user {client_id}: give the node its private key (node config `private-key`)"
            )
        try:
            user.key.verify(signature, signed_message(nonce, client_id), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise IdentityError(
                f"the signature for user {client_id} does not match the key registered in {self.path}"
            ) from None
        return user
