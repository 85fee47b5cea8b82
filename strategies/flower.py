"""fedpub's one Flower strategy: a Message-API ``Strategy`` that runs any fedpub strategy core.

It translates ``ArrayRecord`` ⇄ tensors, discovers which nodes hold which user (a QUERY at
start, because the server cannot read a node's ``node_config``), waits for the expected
population, samples the private cohort with the core's Poisson rule over the users' ids (so a
seed picks the same cohort as the in-process engine), and hands the replies to the core. Failed
or missing replies contribute nothing; the denominator stays the expected cohort. The round's DP
event is composed into the accountant and ε is in the round's metrics. No maths lives here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from logging import INFO, WARNING

import dp_accounting
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.strategy import RoundOutcome, StrategyCore
from fedpub.types import Params, StepState

RoundCallback = Callable[[int, RoundOutcome, Sequence[Mapping[str, float]], int], None]


def to_array_record(tensors: Mapping[str, torch.Tensor]) -> ArrayRecord:
    return ArrayRecord(torch_state_dict={k: v.detach().cpu() for k, v in tensors.items()})


def to_tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return dict(record.to_torch_state_dict())


class NodeDiscoveryError(RuntimeError):
    """Not enough nodes connected, or they do not hold the users the server expects."""


def discover_nodes(
    grid: Grid, private_ids: Sequence[str], node_wait_timeout: float
) -> tuple[dict[str, int], dict[str, int]]:
    """Wait for a node per private user, ask each node which user it holds and whether it is
    public (public users may have no node: a held-out pool lives with the server). Returns the
    node of each private user and of each public user that has one."""
    deadline = time.monotonic() + node_wait_timeout
    expected = len(private_ids)
    while len(grid.get_node_ids()) < expected:
        if time.monotonic() > deadline:
            raise NodeDiscoveryError(
                f"only {len(list(grid.get_node_ids()))} of {expected} expected nodes "
                f"connected within {node_wait_timeout:g} s"
            )
        time.sleep(0.5)
    queries = [
        Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=node, message_type=MessageType.QUERY)
        for node in grid.get_node_ids()
    ]
    node_of: dict[str, int] = {}
    public_nodes: dict[str, int] = {}
    for reply in grid.send_and_receive(queries, timeout=node_wait_timeout):
        if reply.has_error():
            continue
        info = reply.content["info"]
        target = public_nodes if bool(info["is-public"]) else node_of
        target[str(info["client-id"])] = reply.metadata.src_node_id
    missing = [cid for cid in private_ids if cid not in node_of]
    if missing:
        raise NodeDiscoveryError(
            f"{len(missing)} private users have no node (first: {missing[:3]}); "
            f"nodes answered for {len(node_of)} private and {len(public_nodes)} public users"
        )
    log(INFO, "fedpub: %d private and %d public nodes", len(node_of), len(public_nodes))
    return node_of, public_nodes


class FedpubStrategy(Strategy):
    """Runs ``core`` over Flower nodes; ``on_round`` receives each aggregated round."""

    def __init__(
        self,
        core: StrategyCore,
        accountant: UserLevelAccountant,
        *,
        state: StepState,
        private_ids: Sequence[str],
        planned_round_event: dp_accounting.DpEvent,
        delta: float,
        budget_epsilon: float | None = None,
        first_round: int = 0,
        node_wait_timeout: float = 120.0,
        on_round: RoundCallback | None = None,
    ) -> None:
        self.core, self.accountant, self.state = core, accountant, state
        self.private_ids = sorted(private_ids)
        self.planned_round_event, self.delta, self.budget_epsilon = planned_round_event, delta, budget_epsilon
        self.first_round, self.node_wait_timeout, self.on_round = first_round, node_wait_timeout, on_round
        self.node_of: dict[str, int] = {}
        self.public_nodes: dict[str, int] = {}
        self.stopped_by_budget = False
        self._params: Params = {}
        self._cohort: list[str] = []

    # -- node discovery -------------------------------------------------------------------
    def discover_nodes(self, grid: Grid) -> None:
        """Find the node of every private user (and of the public users that have one)."""
        self.node_of, self.public_nodes = discover_nodes(grid, self.private_ids, self.node_wait_timeout)

    # -- training ---------------------------------------------------------------------------
    def round_index(self, server_round: int) -> int:
        return self.first_round + server_round - 1

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if not self.node_of:
            self.discover_nodes(grid)
        t = self.round_index(server_round)
        if self.stopped_by_budget or (
            self.budget_epsilon is not None
            and self.accountant.epsilon_if(self.planned_round_event, self.delta) > self.budget_epsilon
        ):
            self.stopped_by_budget = True
            log(WARNING, "fedpub: round %d would exceed ε = %g; no more rounds", t, self.budget_epsilon)
            return []
        self._params = to_tensors(arrays)
        self._cohort = self.core.sample_cohort(self.private_ids, t)
        return [
            Message(
                RecordDict({"arrays": arrays, "config": ConfigRecord({**config, "round": t, "client-id": cid})}),
                dst_node_id=self.node_of[cid],
                message_type=MessageType.TRAIN,
            )
            for cid in self._cohort
        ]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if self.stopped_by_budget:
            return None, None
        t = self.round_index(server_round)
        by_client: dict[str, tuple[dict[str, torch.Tensor], dict[str, float]]] = {}
        for reply in replies:
            if reply.has_error():
                log(WARNING, "fedpub: a node failed in round %d: %s", t, reply.error.reason)
                continue
            try:
                cid = str(reply.content["client"]["client-id"])
                update, metrics = to_tensors(reply.content["update"]), dict(reply.content["metrics"])
            except Exception as exc:  # noqa: BLE001 (a reply that cannot be read is a failed reply)
                log(WARNING, "fedpub: a malformed reply in round %d: %s: %s", t, type(exc).__name__, exc)
                continue
            if cid in self._cohort:
                by_client[cid] = (update, metrics)
        answered = [cid for cid in self._cohort if cid in by_client]  # the cohort's order, not arrival's
        outcome = self.core.aggregate(
            self._params, [by_client[c][0] for c in answered], self.state, t, sampled=len(self._cohort)
        )
        self.accountant.compose(outcome.event)
        self.state = outcome.state
        client_metrics = [by_client[c][1] for c in answered]
        examples = int(sum(m.get("num-examples", 0) for m in client_metrics))
        if self.on_round is not None:
            self.on_round(t, outcome, client_metrics, examples)
        metrics = {**outcome.metrics, "epsilon": self.accountant.epsilon(self.delta), "delta": self.delta}
        return to_array_record(outcome.params), MetricRecord({k: float(v) for k, v in metrics.items()})

    # -- federated evaluation is not used: the server evaluates centrally ---------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        log(
            INFO,
            "fedpub strategy %s: N=%d private users, expected cohort %g, first round %d",
            self.core.name, self.core.population, self.core.expected_cohort, self.first_round,
        )
