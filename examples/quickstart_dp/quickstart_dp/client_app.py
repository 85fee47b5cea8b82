"""A standard Flower ClientApp (quickstart pattern): ``@app.train()`` replies its new weights under ``arrays``,
``@app.evaluate()`` its metrics; ``lr`` comes from the server's train config. The one fedpub line,
``answer_discovery``, lets the nodes with ``partition-id`` >= ``num-private`` declare themselves public (only the
``dope-nodes`` ServerApp asks; the others send no query)."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedpub.clients.flower_protocol import answer_discovery
from quickstart_dp.task import Net, load_data
from quickstart_dp.task import test as test_fn
from quickstart_dp.task import train as train_fn

app = ClientApp()
answer_discovery(app, public=lambda context: context.node_config["partition-id"] >= context.run_config["num-private"])


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the received model on this node's data."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    trainloader, _ = load_data(int(context.node_config["partition-id"]), int(context.run_config["batch-size"]))
    loss = train_fn(model, trainloader, int(context.run_config["local-epochs"]), float(msg.content["config"]["lr"]),
                    torch.device("cpu"))
    metrics = MetricRecord({"train_loss": loss, "num-examples": len(trainloader.dataset)})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received model on this node's test data."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, testloader = load_data(int(context.node_config["partition-id"]), int(context.run_config["batch-size"]))
    loss, accuracy = test_fn(model, testloader, torch.device("cpu"))
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": accuracy, "num-examples": len(testloader.dataset)})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
