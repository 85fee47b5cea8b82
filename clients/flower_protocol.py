"""Helpers for a Flower user's own ClientApp that speaks fedpub's message protocol (:mod:`fedpub.protocol`).

A standard Flower ClientApp (new weights under ``arrays``, ``num-examples`` in the metrics, no query handler)
already works with :class:`fedpub.strategies.flower.FedpubStrategy`: its node is one private user and the server
computes its update. These helpers add what the standard form cannot say: whether the node's user is public
(:func:`query_reply`), the round's payloads such as AdaDPS's local preconditioner (:func:`read_train`), and a
reply that states it trained with them (:func:`update_reply`)::

    @app.query()
    def query(msg, context):
        return query_reply(msg, client_id=context.node_config["user"], public=False)

    @app.train()
    def train(msg, context):
        task = read_train(msg)
        update, n = my_training(task.params, preconditioner=task.preconditioner)
        return update_reply(msg, update, n, preconditioned=task.preconditioner is not None)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from fedpub import protocol as key


@dataclass(frozen=True)
class TrainInstruction:
    """What a TRAIN message asks of a node."""

    params: dict[str, torch.Tensor]
    """The global model to train from."""
    round: int
    client_id: str
    public: bool
    preconditioner: dict[str, torch.Tensor] | None
    """Divide every local gradient by it, element-wise (AdaDPS client placement); None: train plainly."""
    config: dict[str, Any]
    """The message's whole config record (the server's train config included)."""


def read_train(msg: Message) -> TrainInstruction:
    """The instruction of a fedpub TRAIN message."""
    config = dict(msg.content[key.CONFIG])
    preconditioner = msg.content[key.PRECONDITIONER] if key.PRECONDITIONER in msg.content else None
    return TrainInstruction(
        params=dict(msg.content[key.ARRAYS].to_torch_state_dict()),
        round=int(config[key.ROUND]),
        client_id=str(config[key.CLIENT_ID]),
        public=bool(config.get(key.PUBLIC, False)),
        preconditioner=None if preconditioner is None else dict(preconditioner.to_torch_state_dict()),
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
    preconditioned: bool = False,
) -> Message:
    """The reply to a TRAIN message: the update Δ = w_local − w_global (the model's names, shapes and dtypes),
    the example count and metrics; ``preconditioned`` says the node divided its gradients by the preconditioner
    it was sent (a reply without it, to a message with one, is refused by the server)."""
    client_id = str(msg.content[key.CONFIG][key.CLIENT_ID])
    return Message(
        RecordDict({
            key.UPDATE: ArrayRecord(torch_state_dict={k: v.detach().cpu() for k, v in update.items()}),
            key.METRICS: MetricRecord({**(metrics or {}), key.NUM_EXAMPLES: int(num_examples)}),
            key.CLIENT: ConfigRecord({key.CLIENT_ID: client_id, key.PRECONDITIONED: preconditioned}),
        }),
        reply_to=msg,
    )
