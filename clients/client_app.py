"""The Flower ``ClientApp``: one node = one user, private or public. It loads the user's data named by the node
config, runs the shared local-training function and replies with the update and metrics (the message protocol
is :mod:`fedpub.protocol`).

The node config (``flower-supernode --node-config``; docs/deployment.md):

- ``data-path``: the user's own data on this device (a one-user TFF file or a plain folder,
  :mod:`fedpub.data.device_user`); the node then reads nothing of the experiment's ``data.path``.
- ``client-id``: the user's id (picks the user of a several-user file; names a folder's user). Without
  ``data-path`` and ``client-id``, ``partition-id`` picks the user among the experiment's node users (the training
  file's client ids in TFF's sorted order, then the dataset's held-out public users when they are the public
  pool), which is what Flower simulation sets.
- ``public``: the device's own declaration, true or false; without it the node declares nothing and the server
  decides (the node never guesses its flag from a partial file).
- ``private-key``: the node's EC private key (the one ``flower-supernode --auth-supernode-private-key`` uses),
  with which it signs its user id for a server that keeps a user registry (:mod:`fedpub.node_identity`).

A node trains as the TRAIN message says (a public user with the generator and payloads the in-process engine
gives public users, so both backends agree); a payload local training has no hook for fails the message, naming
it (:mod:`fedpub.clients.payload_hooks`). The experiment config is bound into the app (simulation) or read
from the run config key ``config`` under ``flwr run``: a YAML path, absolute or relative to the app's directory
(``pyproject.toml`` names the bundled quick-start as the default). Each process keeps one resident model and its
datasets open, keyed by the config (and the device's data).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import yaml
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedpub.clients import flower_protocol
from fedpub.clients.app_config import experiment_config
from fedpub.clients.device import resolve_device
from fedpub.clients.local_training import ClientResult, LocalTrainingConfig, train_client
from fedpub.config import ConfigError, ExperimentConfig, dump_config, parse_config
from fedpub.data.base import ClientData, FederatedDataset
from fedpub.data.device_user import load_device_user
from fedpub.data.users import load_data
from fedpub.flags import FlagError
from fedpub.models.seeded import new_model
from fedpub.node_identity import load_private_key, sign_identity
from fedpub.payloads import Payloads
from fedpub.seeding import torch_generator
from fedpub.tasks import Task, get_task
from fedpub.types import Params

@dataclass(frozen=True)
class ClientRuntime:
    """What a node process keeps between messages."""

    config: ExperimentConfig
    train: FederatedDataset
    public: FederatedDataset
    """The public users' data: ``train`` itself, or the dataset's held-out split."""
    model: torch.nn.Module
    local_training: LocalTrainingConfig
    task: Task
    public_ids: frozenset[str]

    @property
    def node_users(self) -> list[str]:
        """The users ``partition-id`` counts through: the training file's, then held-out public users."""
        extra = [] if self.public is self.train else list(self.public.client_ids)
        return list(self.train.client_ids) + extra

    def client_data(self, client_id: str) -> ClientData:
        return (self.public if client_id in self.public_ids else self.train).client_data(client_id)


@lru_cache(maxsize=4)
def _runtime_for(resolved_config: str) -> ClientRuntime:
    config = parse_config(yaml.safe_load(resolved_config))
    data = load_data(config)
    model = new_model(config, data.train.num_classes, resolve_device(config.device))
    return ClientRuntime(
        config, data.train, data.public, model, LocalTrainingConfig(**config.client.local_training_fields()),
        get_task(config.task), frozenset(data.public_ids),
    )


def runtime(config: ExperimentConfig) -> ClientRuntime:
    return _runtime_for(dump_config(config))


@lru_cache(maxsize=4)
def _device_runtime_for(resolved_config: str, data_path: str, client_id: str | None) -> ClientRuntime:
    config = parse_config(yaml.safe_load(resolved_config))
    user = load_device_user(data_path, config, client_id).data
    model = new_model(config, user.num_classes, resolve_device(config.device))
    return ClientRuntime(
        config, user, user, model, LocalTrainingConfig(**config.client.local_training_fields()), get_task(config.task),
        frozenset(),
    )


def node_runtime(context: Context, config: ExperimentConfig) -> tuple[ClientRuntime, str]:
    """This node's runtime and user: the device's own data (``data-path``) or one of the experiment's users."""
    node_config = context.node_config
    if "data-path" in node_config:
        client_id = str(node_config["client-id"]) if "client-id" in node_config else None
        rt = _device_runtime_for(dump_config(config), str(node_config["data-path"]), client_id)
        return rt, rt.train.client_ids[0]
    rt = runtime(config)
    return rt, node_client_id(context, rt)


def node_client_id(context: Context, rt: ClientRuntime) -> str:
    node_config = context.node_config
    if "client-id" in node_config:
        return str(node_config["client-id"])
    if "partition-id" not in node_config:
        raise ConfigError("the node config names no user: give `data-path`, `client-id` or `partition-id`")
    users, partition = rt.node_users, int(node_config["partition-id"])
    if not 0 <= partition < len(users):
        raise ConfigError(
            f"node config partition-id={partition} is out of range: the experiment's data has {len(users)} node "
            f"users (partition ids 0..{len(users) - 1})"
        )
    return users[partition]


def declared_public(context: Context) -> bool | None:
    """The node config's ``public`` declaration (true/false), or None when it declares nothing."""
    try:
        return flower_protocol.node_config_public(context)
    except FlagError as error:
        raise ConfigError(str(error)) from None


def query_reply(msg: Message, context: Context, config: ExperimentConfig) -> Message:
    """Tell the server which user this node holds, its own public declaration (if any) and, with a private key,
    the signature binding the user id to the node's key."""
    _, cid = node_runtime(context, config)
    key_path = context.node_config.get("private-key")
    nonce = flower_protocol.query_nonce(msg)
    signature = sign_identity(load_private_key(str(key_path)), nonce, cid) if key_path and nonce else None
    return flower_protocol.query_reply(msg, client_id=cid, public=declared_public(context), signature=signature)


def train_user(
    rt: ClientRuntime,
    client_id: str,
    params: Params,
    round_index: int,
    *,
    public: bool = False,
    payloads: Payloads = {},  # noqa: B006 (read only)
) -> ClientResult:
    """Train ``client_id`` from ``params`` with the generator every backend gives it (seed, round, purpose, user:
    ``public_client`` for a public user, ``client`` for a private one) and the round's payloads."""
    return train_client(
        rt.model, params, rt.client_data(client_id), rt.local_training,
        torch_generator(rt.config.seed, round_index, "public_client" if public else "client", client_id), rt.task,
        payloads=payloads,
    )


def train_reply(msg: Message, context: Context, config: ExperimentConfig) -> Message:
    """Train this node's user from the received global model (as public or private, as the server says; with the
    payloads the message carries); reply with Δ, metrics and the payloads applied."""
    rt, cid = node_runtime(context, config)
    task = flower_protocol.read_train(msg)
    if task.client_id != cid:
        raise ValueError(f"the server asked for user {task.client_id}, but this node holds {cid}")
    result = train_user(rt, cid, task.params, task.round, public=task.public, payloads=task.payloads)
    return flower_protocol.update_reply(
        msg, dict(result.update), result.num_examples, result.metrics, applied=task.payloads
    )


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
