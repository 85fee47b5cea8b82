"""A user id bound to a node's key (fedpub.node_identity) and the server's checks of a node's claim in discovery
(fedpub.strategies.flower.discovery.node_is_public): unregistered ids, bad or missing signatures, a second node for a taken id and
public flags that disagree are refused, naming the node and the user."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedpub import protocol as key
from fedpub.node_identity import IdentityError, UserRegistry, load_private_key, sign_identity
from fedpub.strategies.flower import RefusedNode
from fedpub.strategies.flower.discovery import NodeMap, node_is_public

NONCE = b"n" * 32


def new_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """An EC key written as ssh-keygen writes it (OpenSSH private key, ``.pub`` line beside it)."""
    private = ec.generate_private_key(ec.SECP384R1())
    path.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                           serialization.NoEncryption()))
    path.with_suffix(".pub").write_bytes(
        private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    return load_private_key(path)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[UserRegistry, dict[str, ec.EllipticCurvePrivateKey]]:
    keys = {name: new_key(tmp_path / name) for name in ("alice", "bob", "mallory")}
    users = {"alice": False, "bob": True}
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump({"users": {
        cid: {"public": public, "key": (tmp_path / f"{cid}.pub").read_text()} for cid, public in users.items()
    }}))
    return UserRegistry.load(path), keys


def claim(cid: str, signer: ec.EllipticCurvePrivateKey | None, **extra) -> dict:
    info = {key.CLIENT_ID: cid, **extra}
    if signer is not None:
        info[key.SIGNATURE] = sign_identity(signer, NONCE, cid)
    return info


def test_a_registered_user_signing_with_its_key_gets_the_registrys_flag(setup) -> None:
    registry, keys = setup
    found = NodeMap()
    assert node_is_public(1, claim("alice", keys["alice"]), found, nonce=NONCE, registry=registry,
                          known_public=None) == ("alice", False)
    assert node_is_public(2, claim("bob", keys["bob"], **{key.IS_PUBLIC: True}), found, nonce=NONCE,
                          registry=registry, known_public=None) == ("bob", True)


@pytest.mark.parametrize(
    ("cid", "signer", "nonce", "message"),
    [
        ("carol", "mallory", NONCE, r"node 7 claims user carol: user carol is not in the registry .*registry.yaml"),
        ("alice", "mallory", NONCE, "node 7 claims user alice: the signature for user alice does not match the key"),
        ("alice", None, NONCE, "node 7 claims user alice: no signature for user alice: give the node its private key"),
        ("alice", "alice", b"another discovery's nonce", "does not match the key"),  # no replay
    ],
)
def test_a_claim_the_registry_does_not_back_is_refused(setup, cid, signer, nonce, message) -> None:
    registry, keys = setup
    info = claim(cid, keys[signer] if signer else None)
    with pytest.raises(RefusedNode, match=message):
        node_is_public(7, info, NodeMap(), nonce=nonce, registry=registry, known_public=None)


def test_a_second_node_claiming_a_taken_id_is_refused_naming_both_nodes(setup) -> None:
    registry, keys = setup
    found = NodeMap(private={"alice": 3})
    with pytest.raises(RefusedNode, match=r"two nodes \(3 and 9\) claim user alice: node 9 is refused"):
        node_is_public(9, claim("alice", keys["alice"]), found, nonce=NONCE, registry=registry, known_public=None)
    with pytest.raises(RefusedNode, match=r"two nodes \(3 and 9\) claim user alice"):  # without a registry too
        node_is_public(9, claim("alice", None), found, nonce=NONCE, registry=None, known_public=None)


def test_a_declaration_that_disagrees_with_the_registry_or_the_servers_split_is_refused(setup) -> None:
    registry, keys = setup
    with pytest.raises(RefusedNode, match=r"user bob \(node 4\): the registry .* says public, node 4's declaration "
                                          "says private"):
        node_is_public(4, claim("bob", keys["bob"], **{key.IS_PUBLIC: False}), NodeMap(), nonce=NONCE,
                       registry=registry, known_public=None)
    with pytest.raises(RefusedNode, match="the server's data split says private, node 4's declaration says public"):
        node_is_public(4, claim("u1", None, **{key.IS_PUBLIC: True}), NodeMap(), nonce=NONCE, registry=None,
                       known_public=["u2"])
    # no declaration: the server's split decides; neither: private
    assert node_is_public(4, claim("u2", None), NodeMap(), nonce=NONCE, registry=None, known_public=["u2"])[1]
    assert not node_is_public(4, claim("u1", None), NodeMap(), nonce=NONCE, registry=None, known_public=None)[1]


def test_bad_registry_and_key_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text("users: {alice: {public: maybe, key: x}}")
    with pytest.raises(IdentityError, match=r"r.yaml: user alice: expected \{public: true\|false"):
        UserRegistry.load(tmp_path / "r.yaml")
    (tmp_path / "r.yaml").write_text("users: {alice: {public: false, key: not-a-key}}")
    with pytest.raises(IdentityError, match="user alice: `key` is not an OpenSSH public key line"):
        UserRegistry.load(tmp_path / "r.yaml")
    with pytest.raises(IdentityError, match="the node's private key .*missing cannot be read"):
        load_private_key(tmp_path / "missing")


@pytest.mark.parametrize("declared", [False, "false", "FALSE", " False "])
def test_a_node_declaring_false_in_any_spelling_is_private(declared) -> None:
    """Issue 32.1: ``bool("false")`` made such a node public (out of N, unclipped, un-noised)."""
    info = claim("u1", None, **{key.IS_PUBLIC: declared})
    assert node_is_public(4, info, NodeMap(), nonce=NONCE, registry=None, known_public=None,
                          trust_declarations=True) == ("u1", False)


@pytest.mark.parametrize("declared", ["maybe", "0", "1", "no", "yes", 1, 0, None, ""])
def test_a_public_flag_that_is_not_true_or_false_is_refused_naming_the_node_and_key(declared) -> None:
    info = claim("u1", None, **{key.IS_PUBLIC: declared})
    with pytest.raises(RefusedNode, match=rf"node 4 \(user u1\): {key.IS_PUBLIC}=.* is not a flag: give true or false"):
        node_is_public(4, info, NodeMap(), nonce=NONCE, registry=None, known_public=None, trust_declarations=True)


def test_a_public_declaration_counts_only_when_the_split_the_registry_or_the_operator_confirms_it(setup) -> None:
    registry, keys = setup
    declared = claim("u1", None, **{key.IS_PUBLIC: "true"})
    with pytest.raises(RefusedNode, match="node 4 declares user u1 public, but nothing on the server confirms it"):
        node_is_public(4, declared, NodeMap(), nonce=NONCE, registry=None, known_public=None)
    assert node_is_public(4, declared, NodeMap(), nonce=NONCE, registry=None, known_public=None,
                          trust_declarations=True) == ("u1", True)
    assert node_is_public(4, declared, NodeMap(), nonce=NONCE, registry=None, known_public=["u1"]) == ("u1", True)
    bob = claim("bob", keys["bob"], **{key.IS_PUBLIC: True})  # the registry says bob is public
    assert node_is_public(4, bob, NodeMap(), nonce=NONCE, registry=registry, known_public=None) == ("bob", True)


def test_a_user_given_twice_in_the_registry_is_refused(tmp_path: Path) -> None:
    """Issue 44.2: the last of two entries won silently, so a second `public: true` could make a user public."""
    new_key(tmp_path / "alice")
    line = (tmp_path / "alice.pub").read_text().strip()
    (tmp_path / "r.yaml").write_text(f"users:\n  alice: {{public: false, key: '{line}'}}\n"
                                     f"  alice: {{public: true, key: '{line}'}}\n")
    with pytest.raises(IdentityError, match=r"r.yaml cannot be read: duplicate key `users.alice` \(line 3; first"):
        UserRegistry.load(tmp_path / "r.yaml")
    (tmp_path / "r.yaml").write_text(f"users:\n  7: {{public: false, key: '{line}'}}\n"
                                     f"  '7': {{public: true, key: '{line}'}}\n")
    with pytest.raises(IdentityError, match="r.yaml: two entries of `users` are one user id once read as text"):
        UserRegistry.load(tmp_path / "r.yaml")
