"""The record keys of fedpub's Flower messages (the protocol between ``strategies/flower/`` and a ClientApp).

Plain strings, so the core stays framework-free and the strategy and the ClientApps share one spelling.

QUERY (server → node, at start): a ``config`` record with ``nonce`` (fresh random bytes). A fedpub node replies
``info`` with ``client-id`` (its user), ``is-public`` only when the node declares it (the user opted out of
privacy, or not; absent: the server decides) and, when it has a private key, ``signature`` over (nonce, user id)
(:mod:`fedpub.node_identity`). A node whose ClientApp has no query handler (a standard Flower ClientApp) is a
private user named by its node id.

TRAIN (server → node, each round): ``arrays`` the global model; ``config`` with ``round`` (fedpub's round
index, from 0), ``client-id`` and ``public``; each client payload the round sends (:mod:`fedpub.payloads`, e.g.
AdaDPS's client placement: ``payload-preconditioner``, the A each local gradient is divided by) as an array record
named ``payload-`` + its name (:func:`payload_record`).

Reply, fedpub's form: ``update`` the model delta Δ = w_local − w_global; ``metrics`` with ``num-examples``;
``client`` with ``client-id`` and ``payloads-applied``, the names of the payloads it trained with (a list of
strings; absent: none). A node that cannot apply a payload it was sent fails the message, naming the payload.
Reply, Flower's standard form: ``arrays`` the new local weights and ``metrics`` with ``num-examples``: the server
computes Δ. A reply that did not apply every payload it was sent, or names one it was not sent, is refused (it
would be another mechanism).
"""

from __future__ import annotations

QUERY_CONFIG = "config"
INFO = "info"
CLIENT_ID = "client-id"
IS_PUBLIC = "is-public"
NONCE = "nonce"
SIGNATURE = "signature"

ARRAYS = "arrays"
CONFIG = "config"
ROUND = "round"
PUBLIC = "public"
PAYLOAD_PREFIX = "payload-"

UPDATE = "update"
METRICS = "metrics"
NUM_EXAMPLES = "num-examples"
CLIENT = "client"
PAYLOADS_APPLIED = "payloads-applied"


def payload_record(name: str) -> str:
    """The record name payload ``name`` travels under in a TRAIN message."""
    return PAYLOAD_PREFIX + name


def payload_name(record: str) -> str | None:
    """The payload a TRAIN message's record ``record`` carries, or None when it carries none."""
    return record[len(PAYLOAD_PREFIX):] if record.startswith(PAYLOAD_PREFIX) else None
