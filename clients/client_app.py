"""The Flower ``ClientApp``: one node = one user. It loads the user's data named by the node
config, runs the shared local-training function and replies with the update and metrics.

Which user a node holds: ``node_config["client-id"]`` if given, else the ``partition-id``-th
client id of the training file (TFF's sorted order), which is what Flower simulation sets.
The experiment config is bound into the app (simulation) or read from the run config key
``config`` (a YAML path; empty = the bundled quick-start) under ``flwr run``. Each process keeps
one resident model and its datasets open, keyed by the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import yaml
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from clients.local_training import ClientResult, LocalTrainingConfig, train_client
from fedpub.config import ExperimentConfig, dump_config, load_config, parse_config
from fedpub.data.base import FederatedDataset
from fedpub.models import build_model
from fedpub.seeding import torch_generator
from fedpub.tasks import Task, get_task
from fedpub.types import Params
from simulations.configs import quickstart_config_path
from simulations.experiment import load_data, resolve_device


@dataclass(frozen=True)
class ClientRuntime:
    """What a node process keeps between messages."""

    config: ExperimentConfig
    train: FederatedDataset
    model: torch.nn.Module
    local_training: LocalTrainingConfig
    task: Task
    public_ids: frozenset[str]


@lru_cache(maxsize=4)
def _runtime_for(resolved_config: str) -> ClientRuntime:
    config = parse_config(yaml.safe_load(resolved_config))
    data = load_data(config)
    model = build_model(config.model.name, data.train.num_classes).to(resolve_device(config.device))
    return ClientRuntime(
        config, data.train, model, LocalTrainingConfig(**config.client.local_training_fields()), get_task(config.task),
        frozenset(data.public_ids),
    )


def experiment_config(context: Context) -> ExperimentConfig:
    """The config named by the run config key ``config`` (the bundled quick-start when empty)."""
    path = str(context.run_config.get("config", "") or "")
    return load_config(path or quickstart_config_path())


def runtime(config: ExperimentConfig) -> ClientRuntime:
    return _runtime_for(dump_config(config))


def node_client_id(context: Context, train: FederatedDataset) -> str:
    node_config = context.node_config
    if "client-id" in node_config:
        return str(node_config["client-id"])
    return train.client_ids[int(node_config["partition-id"])]


def query_reply(msg: Message, context: Context, config: ExperimentConfig) -> Message:
    """Tell the server which user this node holds and whether that user opted out of privacy."""
    rt = runtime(config)
    cid = node_client_id(context, rt.train)
    info = ConfigRecord({"client-id": cid, "is-public": cid in rt.public_ids})
    return Message(RecordDict({"info": info}), reply_to=msg)


def train_user(rt: ClientRuntime, client_id: str, params: Params, round_index: int) -> ClientResult:
    """Train ``client_id`` from ``params`` with the generator every backend gives (seed, round, user)."""
    return train_client(
        rt.model, params, rt.train.client_data(client_id), rt.local_training,
        torch_generator(rt.config.seed, round_index, "client", client_id), rt.task,
    )


def train_reply(msg: Message, context: Context, config: ExperimentConfig) -> Message:
    """Train this node's user from the received global model; reply with Δ and metrics."""
    rt = runtime(config)
    cid = node_client_id(context, rt.train)
    round_index = int(msg.content["config"]["round"])
    params = dict(msg.content["arrays"].to_torch_state_dict())
    result = train_user(rt, cid, params, round_index)
    metrics = MetricRecord({**result.metrics, "num-examples": result.num_examples})
    content = RecordDict(
        {
            "update": ArrayRecord(torch_state_dict=result.update),
            "metrics": metrics,
            "client": ConfigRecord({"client-id": cid}),
        }
    )
    return Message(content, reply_to=msg)


def make_client_app(config: ExperimentConfig | None = None) -> ClientApp:
    """A ClientApp bound to ``config``, or reading it from the run config when None."""
    app = ClientApp()

    def resolve(context: Context) -> ExperimentConfig:
        return config if config is not None else experiment_config(context)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return query_reply(msg, context, resolve(context))

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return train_reply(msg, context, resolve(context))

    return app


app = make_client_app()
