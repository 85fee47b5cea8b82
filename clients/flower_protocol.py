"""Helpers for a Flower user's own ClientApp that speaks fedpub's message protocol (:mod:`fedpub.protocol`).

A standard Flower ClientApp (new weights under ``arrays``, ``num-examples`` in the metrics, no query handler)
already works with :class:`fedpub.strategies.flower.FedpubStrategy`: its node is one private user and the server
computes its update. To let some of its nodes be public users, add one line, :func:`answer_discovery`: the app
then answers the server's discovery QUERY from the node config (``public=true``) or from a function of the
node's context, and trains as before. The other helpers add what the standard form cannot say: whether the
node's user is public (:func:`query_reply`), the round's payloads such as AdaDPS's local preconditioner
(:func:`read_train`, :mod:`fedpub.payloads`), and a reply that names those it trained with (:func:`update_reply`;
the server refuses a reply that did not apply every payload it was sent)::

    @app.query()
    def query(msg, context):
        return query_reply(msg, client_id=context.node_config["user"], public=False)

    @app.train()
    def train(msg, context):
        task = read_train(msg)
        # task.payloads: name -> tensors, e.g. "preconditioner": divide each local gradient by it
        update, n = my_training(task.params, task.payloads)
        return update_reply(msg, update, n, applied=task.payloads)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedpub import protocol as key
from fedpub.flags import privacy_flag


@dataclass(frozen=True)
class TrainInstruction:
    """What a TRAIN message asks of a node."""

    params: dict[str, torch.Tensor]
    """The global model to train from."""
    round: int
    client_id: str
    public: bool
    payloads: dict[str, dict[str, torch.Tensor]]
    """The round's client payloads by name (:mod:`fedpub.payloads`), e.g. ``preconditioner``: divide every local
    gradient by it, element-wise (AdaDPS client placement); empty: train plainly."""
    config: dict[str, Any]
    """The message's whole config record (the server's train config included)."""


def read_train(msg: Message) -> TrainInstruction:
    """The instruction of a fedpub TRAIN message."""
    config = dict(msg.content[key.CONFIG])
    records = {key.payload_name(record): record for record in msg.content.keys()}
    return TrainInstruction(
        params=dict(msg.content[key.ARRAYS].to_torch_state_dict()),
        round=int(config[key.ROUND]),
        client_id=str(config[key.CLIENT_ID]),
        public=privacy_flag(config.get(key.PUBLIC, False), key=key.PUBLIC, source="the TRAIN message's config"),
        payloads={name: dict(msg.content[record].to_torch_state_dict()) for name, record in records.items()
                  if name is not None},
        config=config,
    )


def query_nonce(msg: Message) -> bytes:
    """The nonce of the server's QUERY (what a node signs with its user id; empty from an older server)."""
    config = msg.content[key.QUERY_CONFIG] if key.QUERY_CONFIG in msg.content else {}
    return bytes(config.get(key.NONCE, b""))


def query_reply(msg: Message, *, client_id: str, public: bool | None, signature: bytes | None = None) -> Message:
    """The answer to the server's QUERY: the user this node holds, whether it declares the user public (None:
    no declaration, the server decides) and the signature binding the user id to the node's key
    (:func:`fedpub.node_identity.sign_identity` over :func:`query_nonce`)."""
    info: dict[str, Any] = {key.CLIENT_ID: client_id}
    if public is not None:
        info[key.IS_PUBLIC] = public
    if signature is not None:
        info[key.SIGNATURE] = signature
    return Message(RecordDict({key.INFO: ConfigRecord(info)}), reply_to=msg)


def update_reply(
    msg: Message,
    update: Mapping[str, torch.Tensor],
    num_examples: int,
    metrics: Mapping[str, float] | None = None,
    *,
    applied: Iterable[str] = (),
) -> Message:
    """The reply to a TRAIN message: the update Δ = w_local − w_global (the model's names, shapes and dtypes),
    the example count and metrics; ``applied`` names the payloads the node trained with (the server refuses a
    reply that leaves out one it was sent)."""
    client_id = str(msg.content[key.CONFIG][key.CLIENT_ID])
    return Message(
        RecordDict({
            key.UPDATE: ArrayRecord(torch_state_dict={k: v.detach().cpu() for k, v in update.items()}),
            key.METRICS: MetricRecord({**(metrics or {}), key.NUM_EXAMPLES: int(num_examples)}),
            key.CLIENT: ConfigRecord({key.CLIENT_ID: client_id, key.PAYLOADS_APPLIED: sorted(applied)}),
        }),
        reply_to=msg,
    )


def node_config_public(context: Context) -> bool | None:
    """The node config's ``public`` declaration (true or false, strictly: :func:`~fedpub.flags.privacy_flag`), or
    None when the node config declares nothing."""
    value = context.node_config.get("public")
    return None if value is None else privacy_flag(value, key="public", source=f"node {context.node_id}'s node config")


def answer_discovery(
    app: ClientApp, *, public: Callable[[Context], bool | None] = node_config_public
) -> ClientApp:
    """Register on ``app`` (a standard ClientApp) the query handler fedpub's discovery asks: the node answers for
    the user named by its node id, declaring it public or private as ``public(context)`` says (default: the node
    config's ``public``, e.g. ``flower-supernode --node-config "public=true"``; None declares nothing: private).
    In a simulation, where every node has the same node config, give a function of ``partition-id``. The
    server counts a declaration only when the operator trusts them (``FedpubStrategy(public_nodes=True)``)."""

    @app.query()
    def _answer(msg: Message, context: Context) -> Message:
        return query_reply(msg, client_id=str(context.node_id), public=public(context))

    return app
