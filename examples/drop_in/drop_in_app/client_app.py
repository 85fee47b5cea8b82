"""The ClientApp: one user per SuperNode, speaking fedpub's protocol through ``fedpub.clients.flower_protocol``.

Nodes with ``partition-id`` < population hold private users; the next ones hold public users (people who opted
out of privacy), whose updates DOPE-SGD uses to recenter the clip. A node replies its update Δ = new − received.
"""

from __future__ import annotations

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

from fedpub.clients.flower_protocol import query_reply, read_train, update_reply
from drop_in_app.task import Net, load_data, setting, train

app = ClientApp()


def _user(context: Context) -> tuple[str, bool]:
    """This node's user id and whether the user is public."""
    partition_id = int(context.node_config["partition-id"])
    return f"user-{partition_id}", partition_id >= int(setting(context.run_config, "population"))


@app.query()
def query(msg: Message, context: Context) -> Message:
    client_id, public = _user(context)
    return query_reply(msg, client_id=client_id, public=public)


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    task = read_train(msg)
    unknown = sorted(set(task.payloads) - {"preconditioner"})
    if unknown:  # training without a payload would be another mechanism: fail the message, naming it
        raise ValueError(f"this ClientApp cannot apply the payloads {unknown} (it applies: preconditioner)")
    partition_id = int(context.node_config["partition-id"])
    new, num_examples, loss = train(
        task.params,
        load_data(partition_id),
        epochs=int(setting(context.run_config, "local-epochs")),
        lr=float(setting(context.run_config, "local-lr")),
        batch_size=int(setting(context.run_config, "batch-size")),
        seed=1_000 * partition_id + task.round,
        preconditioner=task.payloads.get("preconditioner"),
    )
    update = {k: new[k] - task.params[k] for k in task.params}
    return update_reply(msg, update, num_examples, {"train-loss": loss}, applied=task.payloads)


@app.evaluate()
def evaluate_fn(msg: Message, context: Context) -> Message:
    """The received model's loss and accuracy on this node's data (the strategy asks the public nodes)."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = load_data(int(context.node_config["partition-id"]))
    with torch.no_grad():
        logits = model(x)
    metrics = {"eval-loss": float(nn.functional.cross_entropy(logits, y)),
               "eval-accuracy": float((logits.argmax(1) == y).float().mean()), "num-examples": len(y)}
    return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
