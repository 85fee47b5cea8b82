"""Fedpub's rounds with client-side per-user maps, Flower's secure aggregation (SecAgg+) and server noise: SecAgg+ as
a transport over the round driver's two halves (:meth:`~fedpub.round_driver.RoundDriver.prepare`,
:meth:`~fedpub.round_driver.RoundDriver.finish_from_sum`).

The server never sees one private user's update, only the cohort's sum:

* the server prepares each round as every backend does (the run session's round driver): the round's public users
  train first, outside SecAgg (their updates are not private: a pool the server holds, ``flower.public_users:
  server``, or their own nodes, ``nodes``, sent fedpub's plain TRAIN message), and the chain's per-user steps prepare
  the values their maps read (DOPE's center, AdaDPS's A, the projection's public basis, the round's C_t); the
  private cohort is sent those values (and the recipe's client payloads) with the model;
* each sampled node trains its user (``train_user``, the generator every backend uses), runs the chain's per-user
  maps on its one row (:meth:`fedpub.step.Chain.map_users`: recentering, preconditioning, projection, clipping to
  C_t, adaptive clipping's unclipped bit), and replies through Flower's ``secaggplus_mod`` the mapped update divided
  by C_t and the tallies beside it, which the mod quantises and masks;
* the ServerApp runs ``SecAggPlusWorkflow`` inside ``DefaultWorkflow`` with a legacy ``Strategy`` (Flower has no
  SecAgg+ for the message-API strategies); the workflow unmasks the sum and hands the strategy the mean over the k
  survivors, so the strategy takes k × that mean, times C_t, as the sum, and the round driver finishes the round from
  it (noise, the center added back, the server optimizer; its event priced and composed). The run session records
  it: the run directory, checkpoint/resume, the trackers, the run phases, exactly as the other backends.

Recipes: every part whose declaration lists the transport ``flower_secagg`` (:mod:`fedpub.recipe_registry`); a config
with another part is refused by name when the run is built. The device builds the same chain from the config (its
per-user maps read only the values it is sent; the privacy seed stays on the server).

Cohorts: fixed-size (``strategy.sampling.kind: fixed``; ``cyclic_fixed``, m of one of k groups a round, for banded
MF noise of more than one band) or DP-FTRL's epoch blocks, with ``accountant: rdp``. Poisson cohorts are refused:
SecAgg+ halts a round of fewer than 2 users, and a release that happens only for some cohort sizes is not the
mechanism the accountant prices. A round whose users all dropped releases the noise on a zero sum; a
round SecAgg+ could not finish (fewer survivors than its reconstruction threshold) releases nothing and is run again.

Quantisation (:class:`Quantisation`): each coordinate of the reply (the mapped update over C_t, of L2 norm at most 1,
and the tallies, checked on the device to lie in [-1, 1]) maps from [-1, 1] to the integers [0, T] by stochastic
rounding; the sums are taken modulo M. T = ⌊(M − 1)/m⌋ (at most 2^30) keeps m replies and the weight total m·T below
M: nothing wraps. The error of each coordinate of the sum is under k·2·C_t/T (one level per survivor, k survivors),
of each summed tally under k·2/T.

What the server still sees in the clear: which users were sampled and which dropped, nothing per user (the reply
carries no metrics and weight 1). A private user's node never replies in the clear: the ClientApp refuses a plain
TRAIN for a private user.

Run it: ``python -m fedpub.simulations.flower.secagg_dp CONFIG [--rounds R] [--fresh]`` (Flower simulation, one SuperNode per
training user); it writes the run directory ``<output_dir>/<name>/`` as ``fedpub run`` does, and resumes it. On a real
SuperLink, ``flwr run`` an app whose components are :data:`server_app` and :data:`client_app` (the experiment YAML
from the run config key ``config``, as fedpub's own app).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.clientapp.typing import ClientAppCallable
from flwr.clientapp import ClientApp
from flwr.common import (
    Code, FitIns, FitRes, Parameters, Scalar, Status, bytes_to_ndarray, ndarray_to_bytes, ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.common.logger import log
from flwr.compat.common import recorddict_compat as compat
from flwr.server import LegacyContext, ServerConfig
from flwr.server.client_manager import ClientManager, SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import Grid, ServerApp

from fedpub import protocol as key
from fedpub import recipe_registry
from fedpub.clients.app_config import experiment_config
from fedpub.clients import flower_protocol
from fedpub.clients.client_app import node_runtime, query_reply, train_reply, train_user
from fedpub.clients.round_training import ServerPublicPool
from fedpub.config import ExperimentConfig, dump_config, load_config, parse_config
from fedpub.payloads import Payloads
from fedpub.privacy.accountant import PrivacyBudget
from fedpub.privacy.events import CohortRule, EpochBlocks, FixedSizeSampling
from fedpub.round_driver import PreparedRound, RoundPlan
from fedpub.step import Chain
from fedpub.strategy import usable_rows
from fedpub.types import Params, Updates
from fedpub.simulations.run.experiment import Experiment, build_experiment
from fedpub.simulations.flower.app_errors import run_main, run_result
from fedpub.simulations.flower.environment import offline_flower_environment, quiet_flower_logging, without_final_results
from fedpub.simulations.flower.server_app import simulated_nodes
from fedpub.simulations.flower.simulation import backend_config, refuse_preload
from fedpub.simulations.run.run_dir import RunDirectory
from fedpub.simulations.flower.server_app import server_public_pool
from fedpub.simulations.run.session import RunResult, RunSession
from fedpub.strategies.build import privacy_budget
from fedpub.strategies.common import make_sampling
from fedpub.strategies.compose import build_strategy
from fedpub.strategies.flower.records import to_array_record
from fedpub.strategies.flower.discovery import discover_nodes
from fedpub.strategies.flower.replies import read_reply

TRANSPORT = "flower_secagg"
MODULUS_RANGE = 2**32
"""SecAgg+'s modulus M: its largest allowed value (a power of 2)."""
MAX_QUANTIZATION_RANGE = 2**30
"""Cap on T: the clients' stochastic rounding casts to int32."""
CLIPPING_RANGE = 1.0
"""c: each reply coordinate lies in [-1, 1] (the mapped update over C_t, the tallies)."""
CLIP_STEP = "clip"
"""The chain's step whose per-user value ``clip_norm`` is the round's C_t (every recipe's clip slot)."""
VALUE, PAYLOAD = "fedpub.value", "fedpub.payload"
NONE = "none"
"""A per-user value the round has not got (None), as the TRAIN config carries it."""
TALLIES, POPULATION, NOISE = "fedpub.tallies", "fedpub.population", "fedpub.noise_multiplier"
"""TRAIN config keys: the per-user values, the client payloads, the tallies' names and what the device's chain is
built with (the private population and the noise multiplier, both public)."""


# -- configuration ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Quantisation:
    """SecAgg+'s quantisation of m replies in [-1, 1] (each sent with weight 1)."""

    quantization_range: int
    """T: [-c, c] maps to the integers [0, T]."""
    modulus_range: int
    """M: sums are taken modulo M."""
    clipping_range: float = CLIPPING_RANGE

    @property
    def step(self) -> float:
        """One quantisation level, 2c/T."""
        return 2 * self.clipping_range / self.quantization_range

    def max_sum_error(self, survivors: int, clip_norm: float = 1.0) -> float:
        """Bound on the error of one coordinate of the sum of ``survivors`` replies, in units of ``clip_norm`` (C_t
        for the update, 1 for a tally): stochastic rounding moves each reply's coordinate by less than one level."""
        return survivors * self.step * clip_norm


def quantisation_for(cohort_size: int, modulus_range: int = MODULUS_RANGE) -> Quantisation:
    """The largest T with m·T < M (at most 2^30): the m quantised replies (each in [0, T]) and their weight total m·T
    never wrap modulo M."""
    if cohort_size < 2:
        raise ValueError(f"SecAgg+ needs a cohort of at least 2 users, got {cohort_size}")
    return Quantisation(int(min((modulus_range - 1) // cohort_size, MAX_QUANTIZATION_RANGE)), int(modulus_range))


def largest_cohort(sampling: CohortRule) -> int:
    """The most users a round of ``sampling`` sums: the fixed size, or the largest epoch block (⌈N/k⌉)."""
    if isinstance(sampling, FixedSizeSampling):  # cyclic or not
        return sampling.cohort_size
    if isinstance(sampling, EpochBlocks):
        return math.ceil(sampling.population / sampling.rounds_per_epoch)
    raise TypeError(f"the SecAgg+ transport needs fixed-size sampling or epoch blocks, got {sampling!r}")


@dataclass(frozen=True)
class SecAggSettings:
    """The SecAgg+ protocol's shares: floats are fractions of the cohort (of the shares for the threshold)."""

    num_shares: int | float = 1.0
    reconstruction_threshold: int | float = 2 / 3


def check_supported(config: ExperimentConfig) -> None:
    """Refuse what the SecAgg+ transport does not run (see the module docstring), naming the field."""
    recipe_registry.check_transport(config.strategy, TRANSPORT)
    if config.strategy.sampling.kind in ("poisson", "cyclic_poisson"):
        raise ValueError(
            "the SecAgg+ transport needs a fixed number of users each round: set strategy.sampling.kind: fixed "
            "(cyclic_fixed in place of cyclic_poisson, or epoch_blocks; and privacy.accountant: rdp, which accounts "
            "them)"
        )
    if not math.isfinite(config.strategy.clip_norm):
        raise ValueError("the SecAgg+ transport needs a finite strategy.clip_norm (clients clip, SecAgg+ quantises)")
    refuse_preload(config, "with SecAgg+ each user trains on its own node")


# -- what a device is sent ------------------------------------------------------------------------
def encode_values(values: Mapping[str, Mapping[str, Any]]) -> dict[str, Scalar]:
    """The per-user steps' values as TRAIN config entries: numbers as floats, tensors (by parameter name) as bytes,
    None (a value the round has not got, e.g. the projection's basis without public updates) as :data:`NONE`."""
    out: dict[str, Scalar] = {}
    for step, named in values.items():
        for name, value in named.items():
            if value is None:
                out[f"{VALUE}/{step}/{name}"] = NONE
            elif isinstance(value, Mapping):
                out |= {f"{VALUE}/{step}/{name}/{p}": ndarray_to_bytes(t.detach().cpu().numpy())
                        for p, t in value.items()}
            elif isinstance(value, (int, float)):
                out[f"{VALUE}/{step}/{name}"] = float(value)
            else:
                raise TypeError(f"step {step!r}'s per-user value {name!r} is a {type(value).__name__}: the SecAgg+ "
                                "transport sends a device numbers and tensors by parameter name")
    return out


def encode_payloads(payloads: Payloads) -> dict[str, Scalar]:
    """The recipe's client payloads (:mod:`fedpub.payloads`) as TRAIN config entries."""
    return {f"{PAYLOAD}/{name}/{p}": ndarray_to_bytes(t.detach().cpu().numpy())
            for name, tensors in payloads.items() for p, t in tensors.items()}


def _tensor(data: Scalar) -> torch.Tensor:
    return torch.from_numpy(np.array(bytes_to_ndarray(data), copy=True))  # type: ignore[arg-type]


def decode_values(config: Mapping[str, Scalar]) -> dict[str, dict[str, Any]]:
    """:func:`encode_values` undone."""
    values: dict[str, dict[str, Any]] = {}
    for k, v in config.items():
        if k.startswith(f"{VALUE}/"):
            step, name, *param = k.split("/", 3)[1:]
            named = values.setdefault(step, {})
            if param:
                named.setdefault(name, {})[param[0]] = _tensor(v)
            else:
                named[name] = None if v == NONE else float(v)  # type: ignore[arg-type]
    return values


def decode_payloads(config: Mapping[str, Scalar]) -> Payloads:
    """:func:`encode_payloads` undone."""
    payloads: dict[str, dict[str, torch.Tensor]] = {}
    for k, v in config.items():
        if k.startswith(f"{PAYLOAD}/"):
            name, param = k.split("/", 2)[1:]
            payloads.setdefault(name, {})[param] = _tensor(v)
    return payloads


def round_clip_norm(values: Mapping[str, Mapping[str, Any]]) -> float:
    """C_t: the clip step's per-user value, which bounds the L2 norm of every mapped update."""
    c = values.get(CLIP_STEP, {}).get("clip_norm")
    if not (isinstance(c, float) and math.isfinite(c) and c > 0):
        raise ValueError(f"the round's clip step {CLIP_STEP!r} gave no finite clip norm C_t > 0 (got {c!r}): the "
                         "SecAgg+ transport scales each reply by C_t")
    return c


def tally_names(chain: Chain, values: Mapping[str, Mapping[str, Any]], params: Params) -> list[str]:
    """The names of the tallies the chain's per-user maps sum beside the updates this round (from a zero row)."""
    zero = {k: torch.zeros_like(v) for k, v in params.items()}
    return sorted(chain.map_users(usable_rows([zero], params), values).tallies)


# -- the client ---------------------------------------------------------------------------------
@lru_cache(maxsize=4)
def _device_chain(resolved_config: str, population: int, noise_multiplier: float) -> Chain:
    config = parse_config(yaml.safe_load(resolved_config))
    strategy, privacy = config.strategy, config.privacy
    epsilon = privacy_budget(strategy, privacy)
    return build_strategy(  # seed 0: the privacy seed stays on the server; only the per-user maps run here
        strategy, sampling=make_sampling(strategy.sampling, population), population=population,
        noise_multiplier=noise_multiplier, seed=0, rounds=config.rounds,
        budget=None if epsilon is None else PrivacyBudget(epsilon, privacy.delta),
    ).aggregator


def device_chain(config: ExperimentConfig, population: int, noise_multiplier: float) -> Chain:
    """The chain of ``config``'s recipe as a device builds it, whose per-user maps (:meth:`Chain.map_users`) read only
    the round's values it is sent."""
    return _device_chain(dump_config(config), population, noise_multiplier)


@dataclass(frozen=True)
class Contribution:
    """What one user adds to the secure sum: its mapped update over C_t (L2 norm at most 1) and its tallies."""

    scaled_update: Updates
    tallies: dict[str, float]


def contribution(
    chain: Chain, update: Updates, params: Params, values: Mapping[str, Mapping[str, Any]], tallies: Sequence[str]
) -> Contribution:
    """The chain's per-user maps on one user's ``update`` (a cohort of one row), divided by C_t; refuses (the user then
    adds nothing) an update that is not finite or not the model's, a map that leaves it above C_t, and tallies other
    than ``tallies`` or outside [-1, 1] (SecAgg+ would cut them silently)."""
    rows = usable_rows([update], params)
    if not len(rows):
        raise ValueError("this user's update is not finite or not the model's names and shapes: nothing is sent")
    mapped = chain.map_users(rows, values)
    c = round_clip_norm(values)
    norm = float(mapped.updates.norms()[0])
    if norm > c * (1 + 1e-6):
        raise ValueError(f"the per-user maps left an update of norm {norm:.6g} above C_t = {c:.6g}")
    if sorted(mapped.tallies) != list(tallies):
        raise ValueError(f"the per-user maps gave the tallies {sorted(mapped.tallies)}, the server expects {tallies}")
    summed = mapped.tally_sums()
    outside = [n for n, v in summed.items() if not abs(v) <= CLIPPING_RANGE]
    if outside:
        raise ValueError(f"the tallies {outside} lie outside [-1, 1], which SecAgg+ would cut: {summed}")
    row = {k: v[0].double() / c for k, v in mapped.updates.stacked().items()}
    return Contribution(row, summed)


def _tensors(arrays: Sequence[np.ndarray], reference: Params) -> dict[str, torch.Tensor]:
    if len(arrays) < len(reference):
        raise ValueError(f"expected {len(reference)} arrays, got {len(arrays)}")
    named = {}
    for (name, ref), array in zip(reference.items(), arrays, strict=False):
        if tuple(array.shape) != tuple(ref.shape):
            raise ValueError(f"array for {name} has shape {array.shape}, expected {tuple(ref.shape)}")
        named[name] = torch.from_numpy(np.array(array, copy=True))
    return named


def masked_train_reply(msg: Message, context: Context, config: ExperimentConfig) -> Message:
    """Train this node's user, run the chain's per-user maps and reply in the legacy FitRes layout that
    ``secaggplus_mod`` quantises and masks: the update over C_t, then the tallies, in float64 (quantised without
    float32 rounding), weight 1 (``num_examples``: the workflow's weighted mean is the plain mean) and no metrics, since
    anything else in the reply would reach the server unmasked."""
    rt, client_id = node_runtime(context, config)
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    cfg = fitins.config
    if str(cfg[key.CLIENT_ID]) != client_id:
        raise ValueError(f"the server asked for user {cfg[key.CLIENT_ID]}, but this node holds {client_id}")
    reference = {name: p.detach() for name, p in rt.model.named_parameters()}
    arrays = parameters_to_ndarrays(fitins.parameters)
    params = {k: v.to(reference[k].dtype) for k, v in _tensors(arrays, reference).items()}
    result = train_user(rt, client_id, params, int(cfg[key.ROUND]), payloads=decode_payloads(cfg))
    chain = device_chain(config, int(cfg[POPULATION]), float(cfg[NOISE]))
    names = [n for n in str(cfg[TALLIES]).split(",") if n]
    mine = contribution(chain, dict(result.update), params, decode_values(cfg), names)
    reply = [mine.scaled_update[k].numpy() for k in reference] + [np.array([mine.tallies[n]]) for n in names]
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(reply), num_examples=1, metrics={})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=False), reply_to=msg)


def public_train_reply(msg: Message, context: Context, config: ExperimentConfig) -> Message:
    """A public user's TRAIN, outside SecAgg+ (its update is not private), replied in the clear as fedpub's ClientApp
    does; a private user is refused: its update goes only through SecAgg+."""
    task = flower_protocol.read_train(msg)
    if not task.public:
        raise ValueError(f"user {task.client_id} is private: its update goes only through SecAgg+, never in the clear")
    return train_reply(msg, context, config)


def secagg_unless_public(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """``secaggplus_mod`` for the SecAgg+ workflow's messages (they carry its config record); a public user's TRAIN
    passes to the app, which refuses it for a private user."""
    if RECORD_KEY_CONFIGS in msg.content.config_records:
        return secaggplus_mod(msg, context, call_next)
    return call_next(msg, context)


def make_client_app(config: ExperimentConfig | None = None) -> ClientApp:
    """A ClientApp bound to ``config`` (or reading it from the run config, under ``flwr run``): QUERY says which user
    the node holds; a private user's TRAIN goes through SecAgg+, a public user's is replied in the clear."""
    app = ClientApp()

    def resolve(context: Context) -> ExperimentConfig:
        return config if config is not None else experiment_config(context)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return query_reply(msg, context, resolve(context))

    @app.train(mods=[secagg_unless_public])
    def train(msg: Message, context: Context) -> Message:
        if RECORD_KEY_CONFIGS in msg.content.config_records:
            return masked_train_reply(msg, context, resolve(context))
        return public_train_reply(msg, context, resolve(context))

    return app


# -- the server ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SecAggRound:
    """One released round as the server saw it."""

    round: int
    cohort: list[str]
    survivors: int
    clip_norm: float
    """C_t."""
    secure_sum: dict[str, torch.Tensor]
    """Σ of the survivors' mapped updates, as SecAgg+ unmasked it (float64)."""
    tallies: dict[str, float]
    """The survivors' tallies summed by SecAgg+."""
    record: dict[str, Any]
    """The round's metrics record, as the run session wrote it."""


@dataclass
class _Pending:
    prepared: PreparedRound
    tallies: list[str]
    clip_norm: float


@dataclass(frozen=True)
class PublicNodes:
    """Public users that are their own nodes (``flower.public_users: nodes``), sent fedpub's TRAIN message outside
    SecAgg+: their updates are not private. A failed or malformed reply is logged and left out (the driver then says
    when a round has no public update)."""

    grid: Grid
    nodes: Mapping[str, int]
    timeout: float | None

    def train(self, params: Params, plan: RoundPlan) -> dict[str, Updates]:
        """The updates of ``plan``'s public cohort trained on their nodes from ``params``."""
        arrays = to_array_record(params)
        messages = []
        for cid in plan.public_cohort:
            content = RecordDict({key.ARRAYS: arrays, key.CONFIG: ConfigRecord(
                {key.ROUND: plan.round, key.CLIENT_ID: cid, key.PUBLIC: True})})
            for name, tensors in plan.public_payloads.items():
                content[key.payload_record(name)] = to_array_record(tensors)
            messages.append(Message(content, dst_node_id=self.nodes[cid], message_type=MessageType.TRAIN))
        user_of = {node: cid for cid, node in self.nodes.items()}
        updates: dict[str, Updates] = {}
        for reply in self.grid.send_and_receive(messages, timeout=self.timeout):
            cid = user_of.get(reply.metadata.src_node_id)
            try:
                if reply.has_error():
                    raise RuntimeError(reply.error.reason)
                if cid not in plan.public_cohort:
                    continue
                updates[cid], _ = read_reply(reply, params, cid, payloads=tuple(plan.public_payloads))
            except Exception as exc:  # noqa: BLE001 (a reply that cannot be read is a failed public reply)
                log(WARNING, "fedpub: public user %s failed in round %d: %s", cid, plan.round, exc)
        return updates


PublicTrainer = ServerPublicPool | PublicNodes
"""Where a round's public users train: the server's pool or their own nodes."""


def to_parameters(params: Params) -> Parameters:
    return ndarrays_to_parameters([v.detach().cpu().numpy() for v in params.values()])


class SecAggStrategy(Strategy):
    """The legacy Strategy ``SecAggPlusWorkflow`` drives, over a run session: prepares each round (public users first),
    sends the private cohort the per-user values and finishes the round from the unmasked sum."""

    def __init__(
        self,
        session: RunSession,
        node_of: Mapping[str, int],
        public_pool: PublicTrainer | None,
        on_round: Callable[[SecAggRound], None] | None = None,
    ) -> None:
        self.session, self.node_of, self.public_pool, self.on_round = session, node_of, public_pool, on_round
        self._pending: _Pending | None = None

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return to_parameters(self.session.params)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        # the next round to release: a round SecAgg+ could not finish (fewer survivors than its threshold: the server
        # saw no sum) released nothing, and is run again, same cohort and noise, in the next server round
        session, t = self.session, self.session.rounds_done
        driver, experiment = session.driver, session.experiment
        self._pending = None
        if not driver.admit(t):
            log(WARNING, "fedpub: %s", driver.refusal)
            return []
        plan = driver.plan(t, session.state)
        public = {} if self.public_pool is None else self.public_pool.train(session.params, plan)
        prepared = driver.prepare(plan, session.params, session.state, public)
        if prepared is None:
            log(WARNING, "fedpub: %s", driver.refusal)
            return []
        chain = experiment.strategy.aggregator
        values = {name: prepared.prep.chain.values[name] for name, step in chain.steps
                  if step.user is not None and step.user.apply is not None}
        names = tally_names(chain, values, session.params)
        self._pending = _Pending(prepared, names, round_clip_norm(values))
        proxies = {proxy.node_id: proxy for proxy in client_manager.all().values()}
        missing = [cid for cid in plan.private_cohort if self.node_of[cid] not in proxies]
        if missing:
            raise RuntimeError(f"round {t}: the nodes of users {missing} are no longer connected")
        config: dict[str, Scalar] = {
            key.ROUND: t, POPULATION: experiment.strategy.population, NOISE: experiment.noise_multiplier,
            TALLIES: ",".join(names), **encode_values(values), **encode_payloads(plan.private_payloads),
        }
        model = to_parameters(session.params)
        return [(proxies[self.node_of[cid]], FitIns(model, {**config, key.CLIENT_ID: cid}))
                for cid in plan.private_cohort]

    def aggregate_fit(
        self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures: list[Any]
    ) -> tuple[Parameters | None, dict[str, Any]]:
        session, pending = self.session, self._pending
        assert pending is not None, "aggregate_fit without a prepared round"
        prepared, t = pending.prepared, pending.prepared.plan.round
        cohort = list(prepared.plan.private_cohort)
        if failures:
            log(WARNING, "fedpub: %d of %d sampled users dropped in round %d", len(failures), len(cohort), t)
        # SecAggPlusWorkflow gives every result the same parameters: the weighted mean of the survivors' replies,
        # all weights 1 here, so the sum is k times it (zero when every user dropped).
        survivors, params = len(results), session.params
        if results:
            arrays = parameters_to_ndarrays(results[0][1].parameters)
            if len(arrays) != len(params) + len(pending.tallies):
                raise ValueError(f"expected {len(params) + len(pending.tallies)} arrays, got {len(arrays)}")
            mean = _tensors(arrays, params)
            secure_sum = {k: v.double() * survivors * pending.clip_norm for k, v in mean.items()}
            tallies = {n: float(a.sum()) * survivors for n, a in zip(pending.tallies, arrays[len(params):],
                                                                    strict=True)}
        else:
            secure_sum = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in params.items()}
            tallies = dict.fromkeys(pending.tallies, 0.0)
        total = {k: v.to(params[k].dtype) for k, v in secure_sum.items()}
        outcome = session.driver.finish_from_sum(prepared, total, survivors, tallies)
        if outcome is None:
            log(WARNING, "fedpub: %s", session.driver.refusal)
            return None, {}
        record = session.record(t, outcome, [], 0)
        session.start_round()
        log(INFO, "fedpub SecAgg+: round %d, %d of %d users summed, ε = %s", t, survivors, len(cohort),
            record.get("epsilon", "(not computed this round)"))
        if self.on_round is not None:
            self.on_round(SecAggRound(t, cohort, survivors, pending.clip_norm, secure_sum, tallies, record))
        if session.driver.keeps_failing:
            raise session.driver.cohorts_keep_failing(t, "fix the clients and run the config again to resume")
        return to_parameters(session.params), {}

    # The session evaluates centrally when it records a round; no federated evaluation (it would be unmasked).
    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> list:
        return []

    def aggregate_evaluate(self, server_round: int, results: list, failures: list) -> tuple[float | None, dict]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict] | None:
        return None


@dataclass(frozen=True)
class RunOptions:
    """How a SecAgg+ run goes: ``fresh`` starts over instead of resuming the run directory; ``on_round`` sees each
    released round."""

    fresh: bool = False
    secagg: SecAggSettings = SecAggSettings()
    on_round: Callable[[SecAggRound], None] | None = None


def run_on_grid(
    grid: Grid, context: Context, config: ExperimentConfig, options: RunOptions = RunOptions(), *,
    deployment: bool = False,
) -> RunResult:
    """Run (or resume) ``config`` with SecAgg+ over the nodes of ``grid``; results go to the run directory.
    ``deployment`` (``flwr run``): the privacy seed is secret and diagnostics are off unless the config says
    otherwise."""
    check_supported(config)
    secagg = options.secagg
    experiment = build_experiment(config, deployment=deployment)
    device_chain(config, experiment.strategy.population, experiment.noise_multiplier)  # the devices' build, checked
    quantisation = quantisation_for(largest_cohort(experiment.strategy.sampling))
    public_nodes = config.flower.public_users == "nodes" and bool(experiment.strategy.public_cohort)
    nodes = discover_nodes(
        grid, population=len(experiment.private_ids), private_ids=experiment.private_ids,
        public_ids=experiment.public_ids if public_nodes else (), known_public=experiment.public_ids,
        node_wait_timeout=config.flower.node_wait_timeout, trust_declarations=public_nodes,
    )
    session = RunSession(experiment, RunDirectory(config.output_dir / config.name), fresh=options.fresh,
                         checkpoint_each_round=True)
    try:
        if session.finished:
            return session.finished_result()
        public: PublicTrainer | None = (PublicNodes(grid, nodes.public, config.flower.round_timeout) if public_nodes
                                        else server_public_pool(session.experiment, session))
        strategy = SecAggStrategy(session, nodes.private, public, options.on_round)
        workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(
            num_shares=secagg.num_shares, reconstruction_threshold=secagg.reconstruction_threshold, max_weight=1.0,
            clipping_range=quantisation.clipping_range, quantization_range=quantisation.quantization_range,
            modulus_range=quantisation.modulus_range, timeout=config.flower.round_timeout,
        ))
        legacy = LegacyContext(context, config=ServerConfig(num_rounds=config.rounds - session.rounds_done),
                               strategy=strategy, client_manager=SimpleClientManager())
        session.start_round()
        with without_final_results():
            workflow(grid, legacy)
        return session.finish()
    finally:
        session.close()


def make_server_app(
    config: ExperimentConfig | None = None, results: list[RunResult | Exception] | None = None,
    options: RunOptions = RunOptions(),
) -> ServerApp:
    """A ServerApp running ``config`` with SecAgg+ (a simulation), or the config the run config names (``flwr run``:
    a deployment); its result, or the error a user fixes that stopped it, is appended to ``results`` when given
    (:func:`~fedpub.simulations.flower.app_errors.run_main`)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        quiet_flower_logging()
        run_main(lambda: run_on_grid(grid, context, config or experiment_config(context), options,
                                     deployment=config is None), results)

    return app


def run_secagg_simulation(
    config: ExperimentConfig, options: RunOptions = RunOptions(), experiment: Experiment | None = None
) -> RunResult:
    """Run (or resume) ``config`` in Flower simulation, one SuperNode per training user, with SecAgg+;
    ``experiment``: ``config``'s, when the caller has built it already."""
    check_supported(config)
    if experiment is None:
        experiment = build_experiment(config)  # config errors (data, accountant, budget) before Ray starts
    offline_flower_environment()
    from flwr.simulation import run_simulation

    results: list[RunResult | Exception] = []
    run_simulation(
        server_app=make_server_app(config, results, options),
        client_app=make_client_app(config),
        num_supernodes=simulated_nodes(experiment),
        backend_config=backend_config(config.flower),
    )
    return run_result(results, "SecAgg+ simulation")


server_app = make_server_app()
"""The ServerApp ``flwr run`` starts (``[tool.flwr.app.components] serverapp``), the experiment from the run config."""
client_app = make_client_app()
"""The ClientApp of its SuperNodes."""


def _share(text: str) -> int | float:
    return float(text) if "." in text else int(text)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fedpub.simulations.flower.secagg_dp",
        description="fedpub's recipes with client-side per-user maps, SecAgg+ and server noise, in Flower simulation",
    )
    parser.add_argument(
        "config", type=Path, help="experiment YAML (strategy.sampling.kind: fixed or epoch_blocks, accountant: rdp)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="override the config's rounds")
    parser.add_argument("--fresh", action="store_true", help="start over instead of resuming the run directory")
    parser.add_argument("--num-shares", type=_share, default=SecAggSettings.num_shares,
                        help="SecAgg+ shares per user key: an int, or a fraction of the cohort (default 1.0)")
    parser.add_argument("--reconstruction-threshold", type=_share, default=SecAggSettings.reconstruction_threshold,
                        help="shares needed to rebuild a key: an int, or a fraction of the shares (default 2/3)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        if args.rounds is not None:
            config = parse_config({**config.model_dump(mode="json"), "rounds": args.rounds}, str(args.config))
        check_supported(config)
        experiment = build_experiment(config)
    except ValueError as error:  # ConfigError and PrivacyError are ValueErrors
        parser.exit(2, f"error: {error}\n")

    def report(outcome: SecAggRound) -> None:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in outcome.record.items()
                          if k.startswith("eval_") and isinstance(v, float))
        epsilon = outcome.record.get("epsilon")
        print(f"round {outcome.round}: {outcome.survivors}/{len(outcome.cohort)} users summed by SecAgg+, "
              f"C_t = {outcome.clip_norm:.4g}" + (f", ε = {epsilon:.4g}" if epsilon is not None else "")
              + (f", {shown}" if shown else ""), flush=True)

    started = time.perf_counter()
    settings = SecAggSettings(args.num_shares, args.reconstruction_threshold)
    result = run_secagg_simulation(config, RunOptions(args.fresh, settings, report), experiment)
    print(f"{result.rounds_done} rounds in {time.perf_counter() - started:.0f} s; ε = {result.epsilon:.4g} at "
          f"δ = {result.delta:g}; results in {result.run_dir.root}")


if __name__ == "__main__":
    main()
