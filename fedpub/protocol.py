"""The record keys of fedpub's Flower messages (the protocol between ``strategies/flower.py`` and a ClientApp).

Plain strings, so the core stays framework-free and the strategy and the ClientApps share one spelling.

QUERY (server → node, at start): a ``config`` record with ``nonce`` (fresh random bytes). A fedpub node replies
``info`` with ``client-id`` (its user), ``is-public`` only when the node declares it (the user opted out of
privacy, or not; absent: the server decides) and, when it has a private key, ``signature`` over (nonce, user id)
(:mod:`fedpub.node_identity`). A node whose ClientApp has no query handler (a standard Flower ClientApp) is a
private user named by its node id.

TRAIN (server → node, each round): ``arrays`` the global model; ``config`` with ``round`` (fedpub's round
index, from 0), ``client-id`` and ``public``; ``preconditioner`` (only when the round sends one, AdaDPS client
placement): the A each local gradient is divided by.

Reply, fedpub's form: ``update`` the model delta Δ = w_local − w_global; ``metrics`` with ``num-examples``;
``client`` with ``client-id`` and ``preconditioned`` (True when it trained with the preconditioner sent).
Reply, Flower's standard form: ``arrays`` the new local weights and ``metrics`` with ``num-examples``: the server
computes Δ. A reply that ignores a preconditioner it was sent is refused (it would be another mechanism).
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
PRECONDITIONER = "preconditioner"

UPDATE = "update"
METRICS = "metrics"
NUM_EXAMPLES = "num-examples"
CLIENT = "client"
PRECONDITIONED = "preconditioned"
