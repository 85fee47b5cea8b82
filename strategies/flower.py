"""fedpub's one Flower strategy: a Message-API ``Strategy`` that runs any fedpub recipe over Flower nodes.

A transport over the core's :class:`~fedpub.round_driver.RoundDriver` (docs/design.md §6): it discovers which node
holds which user (a QUERY at start, since the server cannot read a node's ``node_config``), sends each round's
plan as TRAIN messages (the global model, the round, and the recipe's client payloads, each under its own record
name, such as AdaDPS's local preconditioner), turns
the replies back into updates and hands them to the driver, which aggregates, prices the round's actual event
against the budget and composes it. No maths lives here.

Public users (DOPE's center, AdaDPS's public statistics, PDA-DPMD's mirror, PPSGD's schedule) come either from
a **server-held pool** the ServerApp trains itself (``public_pool``, the default of ``fedpub run --backend
flower``) or from **public nodes**: opted-out devices that declare themselves public, sent TRAIN messages like the
private cohort (``public_nodes=True``). A recipe that trains public users without either is refused when the
strategy is built. The message protocol is :mod:`fedpub.protocol`; a standard Flower ClientApp (new weights
under ``arrays``) is accepted too, its update computed on the server.

For a Flower user's own ServerApp, :meth:`FedpubStrategy.from_config` builds the strategy from a strategy
config and the population, as short as Flower's ``FedAvg``; ``start`` then runs the recipe's run phases
(:mod:`fedpub.run_phases`: warm start, the model average, model reuse) around the rounds, as ``fedpub run`` does.
"""

from __future__ import annotations

import math
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from logging import ERROR, INFO, WARNING
from typing import Any, Protocol

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.constant import ErrorCode
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.superlink.grid import InMemoryGrid
from flwr.serverapp.strategy import Result, Strategy

from fedpub import protocol as key
from fedpub import recipe_registry
from fedpub.config import PrivacyConfig, PublicTrainingConfig, StrategyConfig
from fedpub.flags import FlagError, name_list, privacy_flag
from fedpub.node_identity import IdentityError, UserRegistry
from fedpub.round_driver import RoundDriver, RoundPlan
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.events import PoissonSampling
from fedpub.run_phases import PublicTrainer, RunPhases
from fedpub.safe_text import safe_message
from fedpub.seeding import numpy_generator
from fedpub.strategy import RoundOutcome, StrategyCore
from fedpub.types import Params, StepState, Updates
from fedpub.strategies.build import build_private_strategy

RoundCallback = Callable[[int, RoundOutcome, Sequence[Mapping[str, float]], int], None]
"""Called with (round, outcome, the private replies' metrics, their example count) after each released round."""


def to_array_record(tensors: Mapping[str, torch.Tensor]) -> ArrayRecord:
    return ArrayRecord(torch_state_dict={k: v.detach().cpu() for k, v in tensors.items()})


def to_tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return dict(record.to_torch_state_dict())


def numeric_metrics(reply: Message) -> dict[str, float]:
    """A reply's numeric ``metrics`` (none when it has no metrics record)."""
    content = reply.content
    record = content[key.METRICS] if key.METRICS in content else {}
    return {k: float(v) for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def weighted_mean(metrics: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each metric's mean over ``metrics``, weighted by their ``num-examples`` (equal weights when none has it);
    ``num-examples`` itself is summed."""
    if not metrics:
        return {}
    weights = [float(m.get(key.NUM_EXAMPLES, 0.0)) for m in metrics]
    if sum(weights) <= 0:
        weights = [1.0] * len(metrics)
    names = sorted({k for m in metrics for k in m if k != key.NUM_EXAMPLES})
    means = {}
    for name in names:
        pairs = [(w, m[name]) for w, m in zip(weights, metrics, strict=True) if name in m]
        total = sum(w for w, _ in pairs)
        if total > 0:
            means[name] = sum(w * v for w, v in pairs) / total
    return {**means, key.NUM_EXAMPLES: sum(float(m.get(key.NUM_EXAMPLES, 0.0)) for m in metrics)}


class NodeDiscoveryError(ValueError):
    """Not enough nodes connected, or they do not hold the users the server expects, or cannot say which (the
    message starts with the fix)."""


class MalformedReply(ValueError):
    """A reply the strategy cannot turn into the update the round asked for; it contributes nothing."""


class ProtocolMismatch(MalformedReply):
    """A reply without the model's records, names or shapes: how the ClientApp replies, not what a user trained.
    Raised by :meth:`FedpubStrategy.aggregate_train` too, before anything is released, when every reply of the
    rounds so far had it (nothing ever matched)."""


class PublicPool(Protocol):
    """Public users the server holds and trains itself: their ids, and ``train`` giving the round's public cohort
    their updates Δ = w_local − ``params`` (the model's names and shapes). :class:`TrainFnPool` builds one from a
    Flower user's own training function; fedpub's own ServerApp uses
    :class:`fedpub.clients.round_training.ServerPublicPool`."""

    client_ids: Sequence[str]

    def train(self, params: Params, plan: RoundPlan) -> Mapping[str, Updates]:
        """The updates of ``plan.public_cohort`` trained from ``params`` (with ``plan.public_payloads``)."""
        ...


TrainFn = Callable[[dict[str, torch.Tensor], Any], Mapping[str, torch.Tensor]]
"""A user's training function: (the global model's weights, one public user's data) → the trained weights."""


class TrainFnPool:
    """A server-held public pool from the user's own training function and the public users' data on the server:
    ``train_fn(weights, data[user])`` returns the weights after local training from ``weights`` (a fresh copy of
    the global model's state dict; bind the learning rate and epochs with ``functools.partial``), as a standard
    ClientApp would reply them; the pool turns them into the update. ``data``: public user id → that user's data,
    whatever ``train_fn`` takes (a DataLoader, tensors). A pool cannot apply client payloads (a strategy that sends
    its public users one, such as AdaDPS's client-side preconditioner from side information, refuses it)."""

    def __init__(self, train_fn: TrainFn, data: Mapping[str, Any]) -> None:
        if not data:
            raise ValueError("a public pool needs at least one public user's data")
        self.train_fn = train_fn
        self.data = {str(c): d for c, d in data.items()}
        self.client_ids: list[str] = list(self.data)

    def train(self, params: Params, plan: RoundPlan) -> dict[str, Updates]:
        updates = {}
        for cid in plan.public_cohort:
            new = self.train_fn({k: v.detach().clone() for k, v in params.items()}, self.data[cid])
            if new.keys() != params.keys() or any(new[k].shape != params[k].shape for k in params):
                raise ValueError(
                    f"the train function returned weights for public user {cid} that do not have the model's names "
                    f"and shapes (got {sorted(new.keys())[:5]}): it must return the trained model's state dict"
                )
            updates[cid] = {k: new[k].detach().to(params[k].dtype) - params[k] for k in params}
        return updates


PooledTrainFn = Callable[[dict[str, torch.Tensor], PublicTrainingConfig], Mapping[str, torch.Tensor]]
"""A user's training on the pooled public data: (the model's weights, a phase's section: epochs, batch size, lr,
momentum and, for model reuse, ``prox_weight`` λ of λ‖w − the given weights‖²) → the trained weights."""


class TrainFnPublicTrainer:
    """The run phases' public trainer (:class:`~fedpub.run_phases.PublicTrainer`: warm start, model reuse) from the
    user's own ``train_fn`` over the public users' pooled data on the server; it reports no training metrics."""

    def __init__(self, train_fn: PooledTrainFn) -> None:
        self.train_fn = train_fn

    def train_public(
        self, params: Params, config: PublicTrainingConfig, purpose: str
    ) -> tuple[Params, dict[str, float]]:
        new = self.train_fn({k: v.detach().clone() for k, v in params.items()}, config)
        mismatch = model_mismatch(new, params)
        if mismatch is not None:
            raise ValueError(f"the pooled train function returned weights ({purpose}) that do not fit the model: "
                             f"{mismatch}; it must return the trained model's state dict")
        return {k: new[k].detach().to(params[k].dtype) for k in params}, {}


@dataclass
class NodeMap:
    """Which node holds which user (and the nodes refused, with why)."""

    private: dict[str, int] = field(default_factory=dict)
    public: dict[str, int] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)

    def user_of(self) -> dict[int, tuple[str, bool]]:
        """node id → (user id, is public)."""
        return {
            **{node: (cid, False) for cid, node in self.private.items()},
            **{node: (cid, True) for cid, node in self.public.items()},
        }

    def holder(self, client_id: str) -> int | None:
        return self.private.get(client_id, self.public.get(client_id))


def _ask_nodes(grid: Grid, nodes: Sequence[int], timeout: float, nonce: bytes) -> list[tuple[int, Message]]:
    """(node, its reply) for the QUERY (with ``nonce``) sent to each of ``nodes``. A reply is matched to the node it
    was sent to, not to its sender: when a node is gone, the SuperLink answers in its place."""
    queries = [
        Message(RecordDict({key.QUERY_CONFIG: ConfigRecord({key.NONCE: nonce})}), dst_node_id=node,
                message_type=MessageType.QUERY)
        for node in nodes
    ]
    replies = list(grid.send_and_receive(queries, timeout=timeout))
    sent_to = {q.metadata.message_id: q.metadata.dst_node_id for q in queries}
    return [(sent_to[r.metadata.reply_to_message_id], r) for r in replies if r.metadata.reply_to_message_id in sent_to]


def has_no_query_handler(reply: Message) -> bool:
    """Whether ``reply`` says its ClientApp registers no query function (a standard Flower ClientApp)."""
    error = reply.error
    return error.code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION and "No query function registered" in error.reason


_REASON = re.compile(r"<class '([^']*)'>:<'(.*)'>", re.S)
"""Flower's form of a failed node's reason: ``<class 'ZeroDivisionError'>:<'division by zero'>``."""
_HEADLINE = re.compile(r"^([A-Za-z_][\w.]*(?:\([\w.]+\))?):(?: (.*))?$", re.M)
"""A traceback's exception line: ``module.Type: message`` at the start of a line."""
WRAPPERS = ("RayTaskError", "ClientAppException")
"""What Ray and Flower wrap a ClientApp's exception in, in a simulation (the ClientApp's own type comes first)."""


def failure_summary(reason: str) -> str:
    """``Type: message`` of a failed node's error ``reason`` (Flower's ``<class '...'>:<'...'>``, or an
    exception's text, which in a simulation is Ray's traceback of the ClientApp's exception): the ClientApp's own
    exception type (not Ray's or Flower's wrapper, when the traceback names it) and its message through
    :func:`~fedpub.safe_text.safe_message` (one short line, withheld when it may hold data). The reason is the
    ClientApp's exception text, which can hold anything, a user's data included: nothing else of it is kept."""
    wrapped = _REASON.fullmatch(reason)
    kind, text = (wrapped[1], wrapped[2]) if wrapped else ("", reason)
    if '\n  File "' in text or "Traceback (most recent call last)" in text:
        lines = [(m[1], m[2] or "") for m in _HEADLINE.finditer(text)]
        own = [line for line in lines if not line[0].rsplit(".", 1)[-1].startswith(WRAPPERS)]
        kind, text = (own or lines or [(kind, "")])[0]
    name = kind.rsplit(".", 1)[-1] or "an error"
    message = safe_message(text)
    return f"{name}: {message}" if message else name


class RefusedNode(ValueError):
    """A node's claim the server does not accept (the message names the node and the user)."""


def node_is_public(
    node: int,
    info: Mapping[str, Any],
    found: NodeMap,
    *,
    nonce: bytes,
    registry: UserRegistry | None,
    known_public: Sequence[str] | None,
    trust_declarations: bool = False,
) -> tuple[str, bool]:
    """(the user ``node`` answers for, whether it is public). The registry, when there is one, must hold the user
    and the node's signature must match its key. The flag comes from the server's own split (``known_public``: its
    public users, None when the server has no split), the registry and the node's declaration (a boolean or
    "true"/"false", :func:`~fedpub.flags.privacy_flag`); those that say something must agree (none: private). A
    node that declares itself public is public only when the split or the registry agrees, or when the operator
    trusts the nodes' declarations (``trust_declarations``). A disagreement, an unconfirmed public declaration, a
    flag that is not a boolean, or a user another node already holds, raises :class:`RefusedNode`."""
    cid = str(info[key.CLIENT_ID])
    holder = found.holder(cid)
    if holder is not None:
        raise RefusedNode(f"two nodes ({holder} and {node}) claim user {cid}: node {node} is refused")
    said: dict[str, bool] = {}
    if known_public is not None:
        said["the server's data split"] = cid in known_public
    if registry is not None:
        try:
            said[f"the registry {registry.path}"] = registry.verify(cid, nonce, info.get(key.SIGNATURE)).public
        except IdentityError as error:
            raise RefusedNode(f"node {node} claims user {cid}: {error}") from None
    if key.IS_PUBLIC in info:
        try:
            declared = privacy_flag(info[key.IS_PUBLIC], key=key.IS_PUBLIC, source=f"node {node} (user {cid})")
        except FlagError as error:
            raise RefusedNode(str(error)) from None
        if declared and not said and not trust_declarations:
            raise RefusedNode(
                f"node {node} declares user {cid} public, but nothing on the server confirms it (no data split, no "
                "user registry, and the operator does not trust the nodes' declarations): declare it private "
                "(public=false), stop the node, list the user in a registry, or have public users as nodes "
                "(FedpubStrategy public_nodes=True; flower.public_users: nodes), which trusts declarations"
            )
        said[f"node {node}'s declaration"] = declared
    if len(set(said.values())) > 1:
        raise RefusedNode(
            f"user {cid} (node {node}): "
            + ", ".join(f"{source} says {'public' if flag else 'private'}" for source, flag in said.items())
        )
    return cid, any(said.values())


WAIT_REPORT_EVERY = 5.0
"""Seconds between two "waiting for nodes" lines while discovery waits."""

STANDARD_CLIENT_APP = (
    "a standard ClientApp (no query handler) is a private user: to have public nodes, add "
    "`answer_discovery(app)` (fedpub.clients.flower_protocol) to the ClientApp and declare them (node config "
    "public=true, or a function of partition-id in a simulation)"
)


def discover_nodes(
    grid: Grid,
    *,
    population: int,
    private_ids: Sequence[str] | None,
    public_ids: Sequence[str] = (),
    public_population: int = 0,
    node_wait_timeout: float,
    min_population: int | None = None,
    registry: UserRegistry | None = None,
    known_public: Sequence[str] | None = None,
    trust_declarations: bool = False,
    query: bool = True,
) -> NodeMap:
    """Ask every node which user it holds until the population is there, or ``node_wait_timeout`` passes.

    With ``private_ids`` (a fedpub experiment over its data): every one of them, and every one of ``public_ids``,
    needs a node; nodes of other users are left alone; the server's split says who is public. Without: the
    ``population`` private nodes (more at once is an error), or at least ``min_population`` of them (default:
    ``population``) when the timeout passes, and at least ``public_population`` public ones; nodes that connect
    later are not users of the run. A node whose ClientApp has no query handler (a standard Flower ClientApp) is a
    private user named by its node id, unless discovery needs an answer from it (a user id, a signature, a public
    declaration): then discovery stops at once, its error starting with the fix (:func:`no_query_handler_fix`); a
    node that fails otherwise (gone, or its query handler raised) is asked again. ``known_public``: the public
    users of the server's own split (with ``private_ids``).

    Without ``query`` (no split, no registry, no public nodes: every node is a private user named by its node id)
    no QUERY is sent, so a standard ClientApp is never asked what it cannot answer. While it waits, discovery logs
    a line every few seconds (nodes connected, private, public).

    A node's claim is checked by :func:`node_is_public` (``trust_declarations``: a node's own public declaration
    counts without a split or registry): with a ``registry`` a refused node is logged and left out (the run goes
    on without it); without one, a refused claim (two nodes for one user, a contrary or unconfirmed declaration)
    stops discovery with :class:`NodeDiscoveryError`. Every error names its fix."""
    if not query and (private_ids is not None or registry is not None or public_population):
        raise ValueError("discovery without a QUERY knows no user ids, no signatures and no public nodes")
    deadline = time.monotonic() + node_wait_timeout
    nonce = secrets.token_bytes(32)
    found = NodeMap()
    answered: set[int] = set()
    no_handler: set[int] = set()
    least = population if min_population is None else min_population
    next_report = time.monotonic() + WAIT_REPORT_EVERY
    while True:
        new = [n for n in grid.get_node_ids() if n not in answered]
        replies: list[tuple[int, Message | None]] = (
            [(n, None) for n in new] if not query
            else list(_ask_nodes(grid, new, max(1.0, deadline - time.monotonic()), nonce)) if new else []
        )
        for node, reply in replies:
            if reply is None or reply.has_error():
                standard = reply is not None and has_no_query_handler(reply)
                if standard:
                    fix = no_query_handler_fix(node, private_ids=private_ids, registry=registry,
                                               public_population=public_population)
                    if fix is not None:
                        raise NodeDiscoveryError(fix)
                    no_handler.add(node)
                if reply is None or standard:
                    found.private[str(node)] = node
                    answered.add(node)
                continue
            answered.add(node)
            try:
                cid, public = node_is_public(
                    node, reply.content[key.INFO], found, nonce=nonce, registry=registry, known_public=known_public,
                    trust_declarations=trust_declarations,
                )
            except RefusedNode as refused:
                if registry is None:
                    raise NodeDiscoveryError(str(refused)) from None
                log(ERROR, "fedpub: refused: %s", refused)
                found.refused[node] = str(refused)
                continue
            (found.public if public else found.private)[cid] = node
        if private_ids is None:
            if len(found.private) > population:
                raise NodeDiscoveryError(
                    f"{len(found.private)} private nodes connected, but the strategy was built for a population of "
                    f"{population}: the sampling rate and the accounting assume exactly that many. Build it for "
                    f"{len(found.private)}, start {population}, or declare the others public"
                    + (f" ({len(no_handler)} of them have no query handler: {STANDARD_CLIENT_APP})" if no_handler
                       else "")
                )
            short = (least if time.monotonic() > deadline else population) - len(found.private)
            missing = [f"{short} private users"] if short > 0 else []
            if len(found.public) < public_population:
                missing.append(f"{public_population - len(found.public)} public users")
        else:
            missing = [c for c in [*private_ids, *public_ids] if found.holder(c) is None]
        if not missing:
            break
        connected = len(list(grid.get_node_ids()))
        if time.monotonic() > deadline:
            raise NodeDiscoveryError(
                f"{len(missing)} expected users have no node after {node_wait_timeout:g} s (first: {missing[:3]}); "
                f"{connected} nodes connected, answering for {len(found.private)} private and "
                f"{len(found.public)} public users, {len(found.refused)} refused. "
                + _missing_fix(private_ids)
            )
        if time.monotonic() >= next_report:
            expected = len(private_ids) + len(public_ids) if private_ids is not None else population + public_population
            log(INFO, "fedpub: waiting for nodes: %d of %d, %d private, %d public (%d s left)", connected, expected,
                len(found.private), len(found.public), max(0, int(deadline - time.monotonic())))
            next_report = time.monotonic() + WAIT_REPORT_EVERY
        time.sleep(0.5)
    if private_ids is not None:  # only the users the run expects
        found.private = {c: found.private[c] for c in private_ids}
        found.public = {c: found.public[c] for c in public_ids}
    log(INFO, "fedpub: %d private and %d public nodes, %d refused%s", len(found.private), len(found.public),
        len(found.refused), f" ({len(no_handler)} without a query handler: private)" if no_handler else "")
    return found


def _missing_fix(private_ids: Sequence[str] | None) -> str:
    """What to do when discovery timed out short of users."""
    if private_ids is not None:
        return ("Start a node for each of them (node config `client-id` or `partition-id`), or check the nodes' "
                "logs for why they do not answer")
    return ("Start the missing nodes (a local simulation: flwr run --federation-config \"num-supernodes=N\"), or "
            "build the strategy for the nodes you have (population, public_population)")


def no_query_handler_fix(
    node: int, *, private_ids: Sequence[str] | None, registry: UserRegistry | None, public_population: int
) -> str | None:
    """The error, its fix first, when ``node`` has no query handler (a standard ClientApp) and discovery needs an
    answer it cannot give: its user's id (``private_ids``), a signature (``registry``) or a public declaration
    (``public_population``). Every node of a Flower run runs the same ClientApp, so no node can: discovery stops at
    the first such reply instead of waiting for nodes that never answer. None when the node can be a private user
    named by its node id."""
    standard = f"node {node} has no query handler (a standard ClientApp)"
    if private_ids is not None:
        return ("run fedpub's ClientApp, or add a query handler answering with the node's user id (`@app.query()` "
                "returning `query_reply(msg, client_id=..., public=...)`, fedpub.clients.flower_protocol): "
                f"{standard}, so no node can say which of the {len(private_ids)} expected users it holds")
    if registry is not None:
        return ("run fedpub's ClientApp with node config `private-key`, or add a query handler that signs the "
                "node's user id (`query_reply(..., signature=sign_identity(...))`, fedpub.clients.flower_protocol "
                f"and fedpub.node_identity): {standard}, so no node can prove its user to the registry")
    if public_population:
        return ("add `answer_discovery(app)` (fedpub.clients.flower_protocol) to your ClientApp and declare its "
                "public nodes (node config public=true, or public= a function of partition-id), or build the "
                f"strategy without public nodes: {standard}, so none can be one of the {public_population} public "
                "nodes it waits for")
    return None


def _prefix_rule(extra: Sequence[str], missing: Sequence[str]) -> str | None:
    """The rule that maps every missing name to an extra one (or back) by a prefix, e.g. ``module.``."""
    for added, base in ((extra, missing), (missing, extra)):
        if not base or len(added) != len(base):
            continue
        for name in added:
            prefix = name[: -len(base[0])] if name.endswith(base[0]) and name != base[0] else None
            if prefix is not None and {prefix + k for k in base} == set(added):
                if added is extra:
                    return (f"every name has the prefix `{prefix}` the model's names do not (the state dict of a "
                            "wrapper: DataParallel/DistributedDataParallel `module.`, torch.compile `_orig_mod.`): "
                            f"reply the wrapped model's own state_dict() (e.g. model.module.state_dict()) or strip "
                            f"`{prefix}`")
                return f"every name lacks the model's prefix `{prefix}`: reply the same model's state_dict()"
    return None


def model_mismatch(got: Mapping[str, torch.Tensor], model: Params, *, dtypes: bool = False) -> str | None:
    """What differs between ``got``'s names and shapes (and ``dtypes``) and the model's: the first few names of
    each difference, and the rule when one explains them all (a prefix on every name); None when they match."""
    missing, extra = [k for k in model if k not in got], [k for k in got if k not in model]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{len(missing)} of the model's {len(model)} names are missing (first: {missing[:3]})")
        if extra:
            parts.append(f"{len(extra)} names are not the model's (first: {extra[:3]})")
        rule = _prefix_rule(extra, missing)
        return "; ".join(parts) + ("" if rule is None else f": {rule}")
    shapes = [f"{k} {tuple(got[k].shape)} instead of {tuple(model[k].shape)}" for k in model
              if got[k].shape != model[k].shape]
    if shapes:
        return f"{len(shapes)} tensors have another shape than the model's (first: {'; '.join(shapes[:3])})"
    types = [f"{k} {got[k].dtype} instead of {model[k].dtype}" for k in model if got[k].dtype != model[k].dtype]
    if dtypes and types:
        return f"{len(types)} tensors have another dtype than the model's (first: {'; '.join(types[:3])})"
    return None


def read_reply(
    reply: Message, sent: Params, client_id: str, *, payloads: Sequence[str] = ()
) -> tuple[Updates, dict]:
    """The update and metrics of one reply, in fedpub's form (``update``) or Flower's standard form (new weights
    under ``arrays``: Δ = new − ``sent``). Raises :class:`ProtocolMismatch` for a reply without either record or
    whose names or shapes are not the model's (the message names the differing keys), :class:`MalformedReply` for
    a reply naming another user, and for one whose applied payloads are not the ``payloads`` it was sent."""
    content = reply.content
    metrics = {
        k: float(v) for k, v in (content[key.METRICS] if key.METRICS in content else {}).items()
        if isinstance(v, (int, float))
    }
    if key.UPDATE in content:
        update = to_tensors(content[key.UPDATE])
        mismatch = model_mismatch(update, sent, dtypes=True)
        if mismatch is not None:
            raise ProtocolMismatch(f"the update under `{key.UPDATE}` does not fit the model: {mismatch}")
        info = content[key.CLIENT] if key.CLIENT in content else ConfigRecord({})
        if key.CLIENT_ID in info and str(info[key.CLIENT_ID]) != client_id:
            raise MalformedReply(f"the reply answers for user {info[key.CLIENT_ID]}, but its node holds {client_id}")
        try:
            applied = name_list(info.get(key.PAYLOADS_APPLIED, []), key=key.PAYLOADS_APPLIED,
                                source=f"user {client_id}'s reply")
        except FlagError as error:
            raise MalformedReply(str(error)) from None
    elif key.ARRAYS in content:
        weights = to_tensors(content[key.ARRAYS])
        mismatch = model_mismatch(weights, sent)
        if mismatch is not None:
            raise ProtocolMismatch(f"the weights under `{key.ARRAYS}` do not fit the model: {mismatch}")
        update = {k: weights[k].to(sent[k].dtype) - sent[k] for k in sent}
        applied = ()
    else:
        raise ProtocolMismatch(
            f"no `{key.UPDATE}` or `{key.ARRAYS}` record (got {sorted(content.keys())}): a standard ClientApp "
            f"replies its new weights under `{key.ARRAYS}`, a fedpub one its update under `{key.UPDATE}` "
            "(clients/flower_protocol.py: update_reply)"
        )
    ignored, unsent = sorted(set(payloads) - set(applied)), sorted(set(applied) - set(payloads))
    if ignored:
        raise MalformedReply(
            f"the node was sent the payloads {ignored} (records {[key.payload_record(n) for n in ignored]}) and did "
            f"not say it trained with them (`{key.CLIENT}.{key.PAYLOADS_APPLIED}`): a ClientApp must apply every "
            "payload it is sent (clients/flower_protocol.py: read_train, update_reply)"
        )
    if unsent:
        raise MalformedReply(f"the reply says it applied the payloads {unsent}, which the node was not sent")
    return update, metrics


@dataclass
class Replies:
    """A round's replies read: by user, the private updates and their metrics and the public updates; the
    private users whose reply did not fit the model (:class:`ProtocolMismatch`, why), and the other failures."""

    private: dict[str, Updates] = field(default_factory=dict)
    metrics: dict[str, dict] = field(default_factory=dict)
    public: dict[str, Updates] = field(default_factory=dict)
    mismatched: dict[str, str] = field(default_factory=dict)
    other_failures: int = 0


def _check_flag(name: str, value: object) -> None:
    """Refuse an operator's flag that is not a boolean (``"false"`` is a truthy string: it would turn on what it
    names)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}= takes True or False, got a {type(value).__name__}")


def _log_phase(ran: bool, name: str, metrics: Mapping[str, float]) -> None:
    """One line saying that the run phase ``strategy.<name>`` ran on the public users' pooled data, with its
    metrics (a trainer may report none); nothing when the recipe has no such phase."""
    if ran:
        reported = ", ".join(f"{k} {v:.4g}" for k, v in sorted(metrics.items())) or "its trainer reported none"
        log(INFO, "fedpub: run phase %s ran on the public users' pooled data; metrics: %s", name, reported)


class FedpubStrategy(Strategy):
    """Runs ``driver``'s rounds over Flower nodes; ``on_round`` receives each released round.

    ``public_pool`` (public users the server trains itself) or ``public_nodes`` (public users are nodes that
    declare themselves public; the operator trusts their declarations unless a ``registry`` decides) supply the
    public cohort of a recipe that has one. Federated evaluation (Flower's ``configure_evaluate``) runs the
    ClientApps' evaluate handlers on the public nodes (``evaluate="public"``) or on every node (``"all"``: the
    private nodes' metrics come back as ``diagnostic/private/...``, outside the DP guarantee), a
    ``fraction_evaluate`` of them a round. ``diagnostics`` (None: on in a simulation, off in a deployment) adds
    to each round's metrics, under ``diagnostic/``, the un-noised statistics DP does not cover: the realised
    cohort, the private clients' mean training metrics, the steps' diagnostics. ``state`` is the strategy
    state to start from (None: the core's initial state for the first model); ``first_round`` the round index of
    Flower's round 1 (a resumed run); ``public_population`` the public nodes to wait for when the users are
    learnt from the nodes (default: the recipe's public cohort); ``nodes`` the users' nodes when they were
    discovered before the strategy was built (a deployment whose private users are nodes), else the strategy
    discovers them at its first round, checking their claims against ``registry`` when given.

    ``phases``: the recipe's run phases :meth:`start` runs around the rounds (none: fedpub's own ServerApp, whose
    run session runs them), their public-data training by ``public_trainer``: warm start from the first model (not
    when resuming, ``first_round`` > 0), the model average after each released round (:attr:`average`;
    :meth:`averaged_arrays`; with an ``evaluate_fn`` also evaluated, as ``avg_<metric>``) and model reuse of the last
    round's model, which ``start``'s result holds as the released model. Their metrics: :attr:`phase_metrics`."""

    def __init__(
        self,
        driver: RoundDriver,
        *,
        state: StepState | None = None,
        public_pool: PublicPool | None = None,
        public_nodes: bool = False,
        first_round: int = 0,
        node_wait_timeout: float = 120.0,
        on_round: RoundCallback | None = None,
        public_population: int | None = None,
        nodes: NodeMap | None = None,
        registry: UserRegistry | None = None,
        evaluate: str = "public",
        fraction_evaluate: float = 1.0,
        diagnostics: bool | None = None,
        phases: RunPhases = RunPhases(),
        public_trainer: PublicTrainer | None = None,
    ) -> None:
        core = driver.core
        _check_flag("public_nodes", public_nodes)
        if diagnostics is not None:
            _check_flag("diagnostics", diagnostics)
        if phases.public_sections and public_trainer is None:
            raise ValueError(
                f"strategy.{', strategy.'.join(phases.public_sections)} train the model on the public users' pooled "
                "data around the rounds: give public_trainer= (fedpub.clients.public_training.PooledPublicTrainer "
                "over the public users' data, or TrainFnPublicTrainer(your pooled train function)), or turn them off "
                "(null)"
            )
        if evaluate not in ("public", "all"):
            raise ValueError(f"evaluate={evaluate!r}: give 'public' (the public nodes) or 'all' (every node; the "
                             "private nodes' metrics are diagnostics outside the DP guarantee)")
        if not 0.0 <= fraction_evaluate <= 1.0:
            raise ValueError(f"fraction_evaluate={fraction_evaluate}: give a fraction in [0, 1]")
        if evaluate == "all" and diagnostics is False:
            raise ValueError("evaluate='all' sends back the private nodes' metrics, which DP does not cover: turn "
                             "diagnostics on (diagnostics=True, or None in a simulation) or evaluate='public'")
        if isinstance(public_pool, TrainFnPool) and core.payload_names(public=True):
            raise ValueError(f"strategy `{core.name}` sends its public users the payloads "
                             f"{list(core.payload_names(public=True))}, which a TrainFnPool cannot apply: use public "
                             "nodes, or (AdaDPS's preconditioner) strategy.precondition.placement: server")
        if public_pool is not None and public_nodes:
            raise ValueError("give either a server-held public_pool or public_nodes=True, not both")
        if core.public_cohort and public_pool is None and not public_nodes:
            raise ValueError(
                f"strategy `{core.name}` trains {core.public_cohort} public users each round: give a server-held "
                "public_pool (the public users' data on the server) or public_nodes=True (public users are nodes "
                "that declare themselves public)"
            )
        if public_pool is not None and driver.private_ids is not None and list(public_pool.client_ids) != list(
            driver.public_ids
        ):
            raise ValueError("the public pool's users are not the run's public users")
        self.driver, self.state, self.public_pool, self.public_nodes = driver, state, public_pool, public_nodes
        self.first_round, self.node_wait_timeout, self.on_round = first_round, node_wait_timeout, on_round
        self._next_round = first_round
        """The round index the next :meth:`start` begins at: a second start continues the ledger."""
        default_public = core.public_cohort if public_population is None else public_population
        self.public_population = default_public if public_nodes else 0
        """Public nodes to wait for when the users are not known in advance."""
        self.registry = registry
        self.evaluate, self.fraction_evaluate, self.diagnostics = evaluate, fraction_evaluate, diagnostics
        self.nodes: NodeMap | None = None
        self._user_of: dict[int, tuple[str, bool]] = {}
        if nodes is not None:
            self._use_nodes(nodes)
        self._params: Params = {}
        self._plan: RoundPlan | None = None
        self._protocol_matched = False
        """Whether a private reply has fit the model (until then, a round of only mismatches stops the run)."""
        self.phases, self.public_trainer = phases, public_trainer
        self.average = phases.init_average()
        self.phase_metrics: dict[str, float] = {}
        self._global: Params = {}
        """The last released global model (the first model before round 1)."""

    @classmethod
    def from_config(
        cls,
        strategy: StrategyConfig | Mapping[str, Any],
        *,
        population: int,
        rounds: int,
        privacy: PrivacyConfig | Mapping[str, Any] | None = None,
        seed: int | None = None,
        public_pool: PublicPool | None = None,
        public_nodes: bool = False,
        public_population: int | None = None,
        public_trainer: PublicTrainer | None = None,
        private_ids: Sequence[str] | None = None,
        side_information: Updates | None = None,
        stop_after_failed_rounds: int | None = 3,
        node_wait_timeout: float = 120.0,
        on_round: RoundCallback | None = None,
        **options: Any,
    ) -> FedpubStrategy:
        """fedpub's strategy for a Flower user's own ServerApp: ``strategy`` is a ``strategy:`` section of a fedpub
        config (a dict or :class:`~fedpub.config.StrategyConfig`), ``population`` the number of private users
        (nodes) to wait for, ``rounds`` the rounds ``start`` will run (a target ε is calibrated over them; a later
        round is refused, nothing of it sent or released), ``privacy`` a ``privacy:`` section (δ, accountant,
        budget; default δ = 1e-5, PLD; without a budget the target ε is the budget). The private users are the
        ``population`` nodes that declare themselves private (or have no query handler) when the run starts; more
        at once is an error, later ones are not users of the run. Public users come from ``public_pool`` or, with
        ``public_nodes``, from nodes that declare themselves public: the strategy waits for ``public_population``
        of them (default: the recipe's public cohort), and uses those connected when discovery ends.
        ``private_ids``: the private users' ids when the server knows them (every node answers discovery with its
        user id, as fedpub's ClientApp does; with a server-held ``public_pool`` or none), else the nodes are learnt
        when the run starts. ``seed`` None: the noise and the cohorts draw from a seed taken from
        the OS's entropy and held only in this process (give one to reproduce a run, at the cost that whoever
        knows it can rebuild the noise). The recipe's run phases (``warm_start``, on by default for ``pda_dpmd``;
        ``model_reuse``, PPSGD's; ``model_average``) run in ``start`` as in ``fedpub run``, those that train on the
        public users' pooled data with ``public_trainer``. ``options``: the constructor's ``evaluate``,
        ``fraction_evaluate`` and ``diagnostics``. Then ``strategy.start(grid, initial_arrays, num_rounds=rounds)``.
        """
        _check_flag("public_nodes", public_nodes)  # before the calibration, as every check of the input
        strategy_cfg = StrategyConfig.model_validate(strategy) if isinstance(strategy, Mapping) else strategy
        privacy_cfg = PrivacyConfig.model_validate(privacy or {}) if not isinstance(privacy, PrivacyConfig) else privacy
        recipe_registry.check_transport(strategy_cfg, "flower_strategy")
        built = build_private_strategy(
            strategy_cfg, privacy_cfg, population=population, rounds=rounds,
            seed=secrets.randbits(63) if seed is None else seed, reproducible=seed is not None,
            side_information=side_information,
        )
        budget = strategy_cfg.target_epsilon if built.budget_epsilon is None else built.budget_epsilon
        if private_ids is not None and public_nodes:
            raise ValueError("private_ids is for a server-held public pool (or none): with public_nodes=True the "
                             "users are learnt from the nodes; leave private_ids out")
        if private_ids is not None and len(private_ids) != population:
            raise ValueError(f"private_ids names {len(private_ids)} users for a population of {population}")
        public_ids = list(public_pool.client_ids) if public_pool is not None and private_ids is not None else ()
        driver = RoundDriver(
            built.core, built.new_accountant(), private_ids=private_ids, public_ids=public_ids,
            delta=privacy_cfg.delta, budget_epsilon=budget,
            planned_rounds=rounds, noise_multiplier=built.noise_multiplier,
            stop_after_failed_rounds=stop_after_failed_rounds,
        )
        return cls(driver, public_pool=public_pool, public_nodes=public_nodes, node_wait_timeout=node_wait_timeout,
                   on_round=on_round, public_population=public_population, phases=RunPhases.from_config(strategy_cfg),
                   public_trainer=public_trainer, **options)

    @property
    def core(self) -> StrategyCore:
        return self.driver.core

    @property
    def accountant(self) -> UserLevelAccountant:
        return self.driver.accountant

    @property
    def stopped_by_budget(self) -> bool:
        return self.driver.stopped_by_budget

    def epsilon(self) -> float:
        """ε spent so far at the driver's δ."""
        return self.driver.accountant.epsilon(self.driver.delta)

    # -- node discovery -------------------------------------------------------------------
    def discover_nodes(self, grid: Grid) -> None:
        """Find the node of every private user (and of every public user when public users are nodes), and bind
        the driver's population when it was not known."""
        driver = self.driver
        expected_public = driver.public_ids if (self.public_nodes and driver.private_ids is not None) else ()
        nodes = discover_nodes(
            grid, population=driver.core.population, private_ids=driver.private_ids, public_ids=expected_public,
            public_population=self.public_population, node_wait_timeout=self.node_wait_timeout,
            registry=self.registry, known_public=None if driver.private_ids is None else driver.public_ids,
            trust_declarations=self.public_nodes and self.registry is None,
            query=driver.private_ids is not None or self.registry is not None or self.public_nodes,
        )
        if driver.private_ids is None:
            pool = list(self.public_pool.client_ids) if self.public_pool is not None else []
            driver.bind_users(sorted(nodes.private), sorted(nodes.public) if self.public_nodes else pool)
        self._use_nodes(nodes)

    def _use_nodes(self, nodes: NodeMap) -> None:
        if not self.public_nodes:
            nodes.public = {}
        self.nodes, self._user_of = nodes, nodes.user_of()

    # -- training ---------------------------------------------------------------------------
    def round_index(self, server_round: int) -> int:
        """fedpub's round index (from 0, continued across :meth:`start` calls) of Flower's ``server_round`` (from
        1 in each start)."""
        return self.first_round + server_round - 1

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.nodes is None:
            self._start(grid)
        assert self.nodes is not None
        if self.driver.stopped_by_budget:
            return []
        if not self.driver.admit(self.round_index(server_round)):
            log(WARNING, "fedpub [ROUND %d]: %s", server_round, self.driver.refusal)
            return []
        self._params = to_tensors(arrays)
        if self.state is None:
            self.state = self.core.init(self._params)
        plan = self._plan = self.driver.plan(self.round_index(server_round), self.state)
        self._log_cohort(server_round, plan)
        sends = [(cid, False) for cid in plan.private_cohort]
        if self.public_nodes:
            sends += [(cid, True) for cid in plan.public_cohort]
        messages = []
        for cid, public in sends:
            content = RecordDict({
                key.ARRAYS: arrays,
                key.CONFIG: ConfigRecord({**config, key.ROUND: plan.round, key.CLIENT_ID: cid, key.PUBLIC: public}),
            })
            for name, tensors in plan.payloads(public).items():
                content[key.payload_record(name)] = to_array_record(tensors)
            node = (self.nodes.public if public else self.nodes.private)[cid]
            messages.append(Message(content, dst_node_id=node, message_type=MessageType.TRAIN))
        return messages

    def _read_replies(self, plan: RoundPlan, replies: Iterable[Message]) -> Replies:
        """The private updates and metrics and the public updates of the planned users, by user; failed and
        malformed replies are logged and left out (the private ones counted: a failed node whose user is unknown
        counts as private)."""
        read = Replies()
        for reply in replies:
            cid, is_public = self._user_of.get(reply.metadata.src_node_id, (None, False))
            if reply.has_error():
                log(WARNING, "fedpub: a node failed in round %d: %s", plan.round, failure_summary(reply.error.reason))
                read.other_failures += not is_public
                continue
            if cid not in (plan.public_cohort if is_public else plan.private_cohort):
                continue  # not asked this round
            try:
                update, reply_metrics = read_reply(
                    reply, self._params, cid, payloads=tuple(plan.payloads(is_public))
                )
            except Exception as exc:  # noqa: BLE001 (a reply that cannot be read is a failed reply)
                log(WARNING, "fedpub: a malformed reply of %s user %s in round %d: %s: %s",
                    "public" if is_public else "private", cid, plan.round, type(exc).__name__,
                    exc if isinstance(exc, MalformedReply) else safe_message(str(exc)))
                if not is_public and isinstance(exc, ProtocolMismatch):
                    read.mismatched[cid] = str(exc)
                elif not is_public:
                    read.other_failures += 1
                continue
            if is_public:
                read.public[cid] = update
            else:
                read.private[cid], read.metrics[cid] = update, reply_metrics
        return read

    def _check_protocol(self, plan: RoundPlan, read: Replies) -> None:
        """Until one private reply has fit the model, a round whose every reply is a :class:`ProtocolMismatch`
        stops the run before the round is released: the records, names and shapes a ClientApp replies are its
        code's, the same whatever a user's data, so this decision does not depend on any user's data."""
        if read.private:
            self._protocol_matched = True
        if self._protocol_matched or not read.mismatched or read.other_failures:
            return
        cid, why = next(iter(read.mismatched.items()))
        raise ProtocolMismatch(
            f"round {plan.round}: every reply ({len(read.mismatched)} of {len(plan.private_cohort)} sampled private "
            f"users) is malformed and no reply has fit the model yet, so the ClientApp does not speak the protocol; "
            f"the round is not released (ε = {self.epsilon():.4g} spent). User {cid}: {why}"
        )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        plan = self._plan
        if self.driver.stopped_by_budget or plan is None:
            return None, None
        read = self._read_replies(plan, replies)
        self._check_protocol(plan, read)
        public = read.public
        if self.public_pool is not None:
            public = dict(self.public_pool.train(self._params, plan))
        outcome = self.driver.finish(plan, self._params, self.state, read.private, public)
        self._plan = None
        if outcome is None:
            log(WARNING, "fedpub [ROUND %d]: %s", server_round, self.driver.refusal)
            return None, None
        self.state, self._global = outcome.state, outcome.params
        self.average = self.phases.update_average(self.average, outcome.params)
        answered = [read.metrics[c] for c in plan.private_cohort if c in read.metrics]
        if self.on_round is not None:
            examples = int(sum(m.get(key.NUM_EXAMPLES, 0) for m in answered))
            self.on_round(plan.round, outcome, answered, examples)
        if self.driver.keeps_failing:
            raise self.driver.cohorts_keep_failing(plan.round, "the strategy stopped; fix the clients and start again")
        metrics = {**outcome.metrics, "epsilon": self.epsilon(), "delta": self.driver.delta,
                   **self.round_diagnostics(outcome, answered)}
        return to_array_record(outcome.params), MetricRecord({k: float(v) for k, v in metrics.items()})

    # -- the run phases around the rounds (fedpub.run_phases) ----------------------------------------------------
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Flower's rounds (``Strategy.start``) with the recipe's run phases around them: the rounds start from
        the warm-started ``initial_arrays`` (a fresh run), and the result's ``arrays`` is the released model (model
        reuse of the last round's model, or that model). Each phase that runs logs one line with its metrics (a
        user's own trainer, :class:`TrainFnPublicTrainer`, reports none); a start that continues at a later round
        says that it skips the warm start.

        ``num_rounds`` must fit in the rounds the strategy was built for (its noise calibrated over them): more is
        refused before anything runs. A second ``start`` continues the first: its rounds are the next ones (fresh
        cohorts), composed into the same accountant, so :meth:`epsilon` prices everything the mechanism ran; a
        strategy that has used its rounds, or was stopped by its budget, refuses to start again."""
        self._check_rounds_left(num_rounds)
        params = to_tensors(initial_arrays)
        if self._next_round == 0:
            params, self.phase_metrics = self.phases.before_rounds(params, self.public_trainer)
            _log_phase(self.phases.warm_start is not None, "warm_start", self.phase_metrics)
        elif self.phases.warm_start is not None:
            log(INFO, "fedpub: run phase warm_start skipped: this start begins at round %d, not from a first model",
                self._next_round)
        self.first_round, self._next_round = self._next_round, self._next_round + num_rounds
        self._global = params
        result = super().start(grid, to_array_record(params), num_rounds, timeout, train_config, evaluate_config,
                               self._with_average(evaluate_fn))
        released, metrics = self.phases.after_rounds(self._global, self.public_trainer)
        _log_phase(self.phases.model_reuse is not None, "model_reuse", metrics)
        self.phase_metrics.update(metrics)
        result.arrays = to_array_record(released)
        return result

    def _check_rounds_left(self, num_rounds: int) -> None:
        """Refuse, before anything runs, a start of more rounds than the strategy has left (or of none)."""
        if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 1:
            raise ValueError(f"start(num_rounds=...): give a whole number of rounds >= 1 (got a "
                             f"{type(num_rounds).__name__})")
        if self.driver.stopped_by_budget:
            raise ValueError(f"this strategy has stopped ({self.driver.refusal}); build a new one for a new run")
        planned = self.driver.planned_rounds
        if planned is None:
            return
        left = planned - self._next_round
        if num_rounds > left:
            ran = f"{self._next_round} already run, " if self._next_round else ""
            raise ValueError(
                f"start(num_rounds={num_rounds}): the strategy was built for rounds={planned} (its noise calibrated "
                f"over them; {ran}{left} left, ε = {self.epsilon():.4g} spent): give num_rounds <= {left}, or build "
                "the strategy with more rounds"
            )

    def averaged_arrays(self) -> ArrayRecord | None:
        """The model average (``strategy.model_average``) of the released rounds (None before the first or when
        the recipe has none)."""
        averaged = self.phases.averaged(self.average)
        return None if averaged is None else to_array_record(averaged)

    def _with_average(
        self, evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None
    ) -> Callable[[int, ArrayRecord], MetricRecord | None] | None:
        """``evaluate_fn`` that also evaluates the model average, its metrics prefixed ``avg_`` (as fedpub run's)."""
        if evaluate_fn is None or self.phases.model_average is None:
            return evaluate_fn

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            metrics, averaged = evaluate_fn(server_round, arrays), self.averaged_arrays()
            of_average = None if averaged is None else evaluate_fn(server_round, averaged)
            if of_average is None:
                return metrics
            return MetricRecord({**(metrics or {}), **{f"avg_{k}": v for k, v in of_average.items()}})

        return evaluate

    # -- federated evaluation: the public nodes' (and, as a diagnostic, the private nodes') evaluate handlers ------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.nodes is None or self.driver.stopped_by_budget:
            return []
        targets = [(cid, node, True) for cid, node in self.nodes.public.items()]
        if self.evaluate == "all":
            targets += [(cid, node, False) for cid, node in self.nodes.private.items()]
        count = min(len(targets), math.ceil(len(targets) * self.fraction_evaluate))
        return [
            Message(
                RecordDict({
                    key.ARRAYS: arrays,
                    key.CONFIG: ConfigRecord({**config, key.ROUND: self.round_index(server_round), key.CLIENT_ID: cid,
                                              key.PUBLIC: public}),
                }),
                dst_node_id=node, message_type=MessageType.EVALUATE,
            )
            for cid, node, public in self._evaluation_sample(targets, count, self.round_index(server_round))
        ]

    def _evaluation_sample(self, targets: list, count: int, round_index: int) -> list:
        """``count`` of the evaluation targets, drawn from the strategy's seed (secret in a deployment,
        reproducible in a simulation), like the cohorts."""
        rng = numpy_generator(self.core.seed, round_index, "evaluate")
        return [targets[i] for i in sorted(rng.choice(len(targets), size=count, replace=False))]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The evaluate replies' metrics averaged by ``num-examples``: the public nodes' as they are, the private
        nodes' (``evaluate="all"``) under ``diagnostic/private/`` (not covered by DP)."""
        public: list[Mapping[str, float]] = []
        private: list[Mapping[str, float]] = []
        for reply in replies:
            if reply.has_error():
                log(WARNING, "fedpub: a node failed to evaluate in round %d: %s", server_round,
                    failure_summary(reply.error.reason))
                continue
            _, is_public = self._user_of.get(reply.metadata.src_node_id, (None, False))
            (public if is_public else private).append(numeric_metrics(reply))
        diagnostic = {f"diagnostic/private/{k}": v for k, v in weighted_mean(private).items()}
        averaged = {**weighted_mean(public), **diagnostic}
        return MetricRecord(averaged) if averaged else None

    # -- what the log shows ----------------------------------------------------------------------
    def _start(self, grid: Grid) -> None:
        """Before round 1: decide diagnostics (None: on in a simulation), say what evaluation runs, discover."""
        if self.diagnostics is None:
            self.diagnostics = isinstance(grid, InMemoryGrid)
        if self.evaluate == "all" and not self.diagnostics:
            raise ValueError("evaluate='all' in a deployment sends back the private nodes' metrics, which DP does "
                             "not cover: give diagnostics=True to accept that, or evaluate='public'")
        self.discover_nodes(grid)
        assert self.nodes is not None
        if self.diagnostics:
            log(WARNING, "fedpub: diagnostics on: each round's diagnostic/... metrics are statistics of the private "
                "users that DP does not cover (diagnostics=False turns them off)")
        if not self.nodes.public and self.evaluate == "public":
            log(INFO, "fedpub: no federated evaluation (no public nodes; private nodes evaluate only with "
                "evaluate='all', as a diagnostic): evaluate centrally with start(evaluate_fn=...)")

    def _log_cohort(self, server_round: int, plan: RoundPlan) -> None:
        """The round's cohort size where it is not private (a fixed-size cohort; a Poisson cohort's realised size
        only as a diagnostic)."""
        core = self.core
        public = f", {len(plan.public_cohort)} public users" if core.public_cohort else ""
        if not isinstance(core.sampling, PoissonSampling):
            size = f"{len(plan.private_cohort)} of {core.population} private users"
        else:
            realised = f"; diagnostic: {len(plan.private_cohort)} sampled" if self.diagnostics else ""
            size = f"a Poisson cohort of expected size {core.expected_cohort:g} of {core.population} private users" \
                   f" (its size is private{realised})"
        log(INFO, "fedpub [ROUND %d]: %s%s", server_round, size, public)

    def round_diagnostics(self, outcome: RoundOutcome, client_metrics: Sequence[Mapping[str, float]]) -> dict:
        """``diagnostic/``-prefixed round statistics for the round's metrics when diagnostics are on (else none):
        the outcome's diagnostics (the realised cohort, failures, the steps') and the private clients' training
        metrics averaged by ``num-examples``."""
        if not self.diagnostics:
            return {}
        stats = {**outcome.diagnostics, **{f"train/{k}": v for k, v in weighted_mean(client_metrics).items()}}
        return {f"diagnostic/{k}": float(v) for k, v in stats.items()}

    def summary(self) -> None:
        core = self.core
        public = "server-held pool" if self.public_pool is not None else "nodes" if self.public_nodes else "none"
        log(
            INFO,
            "fedpub strategy %s: N=%d private users, expected cohort %g, %d public users a round (%s), first round %d",
            core.name, core.population, core.expected_cohort, core.public_cohort, public, self.first_round,
        )
