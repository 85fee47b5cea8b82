"""Which node holds which user: the QUERY a run starts with (the server cannot read a node's ``node_config``),
each node's claim checked (its user id, its public declaration read strictly, a registry's signature), and the
errors that stop discovery, each message starting with its fix."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from logging import ERROR, INFO
from typing import Any

from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common.constant import ErrorCode
from flwr.common.logger import log
from flwr.serverapp import Grid

from fedpub import protocol as key
from fedpub.flags import FlagError, privacy_flag
from fedpub.node_identity import IdentityError, UserRegistry


class NodeDiscoveryError(ValueError):
    """Not enough nodes connected, or they do not hold the users the server expects, or cannot say which (the
    message starts with the fix)."""


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
