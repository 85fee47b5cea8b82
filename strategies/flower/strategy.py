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
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.superlink.grid import InMemoryGrid
from flwr.serverapp.strategy import Result, Strategy

from fedpub import protocol as key
from fedpub import recipe_registry
from fedpub.config import PrivacyConfig, StrategyConfig
from fedpub.node_identity import UserRegistry
from fedpub.round_driver import RoundDriver, RoundPlan
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.events import CyclicPoissonSampling, PoissonSampling
from fedpub.run_phases import PublicTrainer, RunPhases
from fedpub.safe_text import safe_message
from fedpub.seeding import numpy_generator
from fedpub.strategy import RoundOutcome, StrategyCore
from fedpub.types import Params, StepState, Updates
from fedpub.strategies.build import build_private_strategy
from fedpub.strategies.flower.records import numeric_metrics, to_array_record, to_tensors, weighted_mean
from fedpub.strategies.flower.replies import MalformedReply, ProtocolMismatch, Replies, failure_summary, read_reply
from fedpub.strategies.flower.discovery import NodeMap, discover_nodes
from fedpub.strategies.flower.public_pools import PublicPool, TrainFnPool

RoundCallback = Callable[[int, RoundOutcome, Sequence[Mapping[str, float]], int], None]
"""Called with (round, outcome, the private replies' metrics, their example count) after each released round."""


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
        if not isinstance(core.sampling, (PoissonSampling, CyclicPoissonSampling)):
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
