"""The Flower ``ServerApp``: builds the experiment, restores or starts its run directory and runs
fedpub's strategy over the connected nodes, writing results exactly as the in-process engine does.

The private users are the training file's (``flower.private_users: data``) or, in a deployment, the nodes that
register as private (``nodes``: the server reads no private data; the strategy, its noise calibrated to a target ε
and q = m/N, is built for the N nodes found). Every recipe runs here: the round driver is the session's (the same sampling, public schedule, budget rule and
ledger as in-process); the public users train in a pool the server holds (``flower.public_users: server``, the
default) or on their own nodes (``nodes``). Under ``flwr run`` the experiment is the YAML named by the run config
key ``config`` (as the ClientApp reads it; pyproject.toml's default is the bundled quick-start); the simulation
runner binds a config directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from logging import INFO

from flwr.app import Context
from flwr.common.logger import log
from flwr.superlink.grid import InMemoryGrid
from flwr.serverapp import Grid, ServerApp

from fedpub.clients.app_config import experiment_config
from fedpub.clients.round_training import ServerPublicPool
from fedpub.config import ExperimentConfig
from fedpub.config import ConfigError
from fedpub.data.base import FederatedDataset
from fedpub.simulations.run.experiment import Experiment, build_experiment
from fedpub.simulations.flower.app_errors import run_main
from fedpub.simulations.flower.environment import quiet_flower_logging, without_final_results
from fedpub.simulations.run.run_dir import RunDirectory
from fedpub.simulations.run.session import RunResult, RunSession
from fedpub.node_identity import UserRegistry
from fedpub.recipe_registry import check_transport
from fedpub.strategies.flower.records import to_array_record
from fedpub.strategies.flower.strategy import FedpubStrategy
from fedpub.strategies.flower.discovery import NodeMap, discover_nodes


def server_public_pool(experiment: Experiment, session: RunSession) -> ServerPublicPool | None:
    """The public users the ServerApp trains itself, on the session's resident model and with its cohort trainer
    (whose path choices the session keeps in ``paths.json``) (None when the recipe trains none each round, or they
    are nodes)."""
    cfg = experiment.config
    if not experiment.strategy.public_cohort or cfg.flower.public_users != "server":
        return None
    trainer = session.cohort_trainer()
    return ServerPublicPool(trainer, experiment.public_data, experiment.public_ids, cfg.seed)


def discover_private_nodes(grid: Grid, config: ExperimentConfig, registry: UserRegistry | None) -> NodeMap:
    """The nodes that register as private (``flower.expected_private_nodes``, or at least
    ``flower.min_private_nodes`` after ``flower.node_wait_timeout``) and, when public users are nodes, the public
    ones the recipe trains each round. Without a user registry, a node's public declaration counts only when
    public users are nodes (``flower.public_users: nodes`` is the operator's trust in the declarations)."""
    flower = config.flower
    assert flower.expected_private_nodes is not None  # the config requires it with private_users `nodes`
    public_nodes = config.strategy.public_clients_per_round if flower.public_users == "nodes" else 0
    return discover_nodes(
        grid, population=flower.expected_private_nodes, private_ids=None, public_population=public_nodes,
        node_wait_timeout=flower.node_wait_timeout, min_population=flower.min_private_nodes, registry=registry,
        trust_declarations=flower.public_users == "nodes",
    )


def simulated_nodes(experiment: Experiment) -> int:
    """How many virtual SuperNodes a simulation of ``experiment`` starts: :func:`federation_size` of its data."""
    return federation_size(experiment.config, experiment.train, experiment.public_data, experiment.public_ids)


def federation_size(
    config: ExperimentConfig, train: FederatedDataset, public: FederatedDataset, public_ids: Sequence[str]
) -> int:
    """One virtual SuperNode per user of the training file (its public users among them), plus one per held-out
    public user (``public`` is not ``train``) when public users are nodes (``flower.public_users: nodes``);
    ``partition-id`` counts through them in that order."""
    heldout = public is not train and config.flower.public_users == "nodes"
    return len(train.client_ids) + (len(public_ids) if heldout else 0)


def check_simulated_nodes(grid: Grid, experiment: Experiment, *, poll: float = 0.5) -> None:
    """In Flower's Simulation Engine (an in-memory grid: every virtual SuperNode is registered as the run starts,
    none joins later) the federation must have one SuperNode per node user of the experiment
    (:func:`simulated_nodes`); otherwise fail now, naming both numbers and the fix,
    instead of waiting ``flower.node_wait_timeout`` for nodes that never come. The count is read once it is steady
    (the engine registers its nodes while the ServerApp starts). A deployment's SuperNodes connect over time: no
    check there."""
    if not isinstance(grid, InMemoryGrid) or experiment.config.flower.private_users != "data":
        return
    expected = simulated_nodes(experiment)
    deadline = time.monotonic() + experiment.config.flower.node_wait_timeout
    count, previous = len(list(grid.get_node_ids())), -1
    while (count == 0 or count != previous) and time.monotonic() < deadline:
        time.sleep(poll)
        count, previous = len(list(grid.get_node_ids())), count
    if count != expected:
        raise ConfigError(
            f"the simulated federation has {count} SuperNodes, but the experiment {experiment.config.name!r} has "
            f"{expected} users that each need one: run it with "
            f"`flwr run . --federation-config \"num-supernodes={expected}\"`, or with "
            "`python -m fedpub.simulations.flower.deploy.local --simulation --config ...`, which sizes the federation itself"
        )


def run_on_grid(
    grid: Grid,
    config: ExperimentConfig,
    *,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    deployment: bool = False,
) -> RunResult:
    """Run (or resume) ``config`` over the nodes of ``grid``; results go to the run directory. ``deployment``
    (``flwr run``): the privacy seed is secret and diagnostics are off unless the config says otherwise. With
    ``flower.private_users: nodes`` the private users are the nodes that register as private (checked against
    ``flower.user_registry`` when set), found before the strategy is built for their number."""
    check_transport(config.strategy, "flower")
    flower = config.flower
    registry = UserRegistry.load(flower.user_registry) if flower.user_registry is not None else None
    nodes = discover_private_nodes(grid, config, registry) if flower.private_users == "nodes" else None
    node_users = None if nodes is None else (
        sorted(nodes.private), sorted(nodes.public) if flower.public_users == "nodes" else None
    )
    experiment = build_experiment(config, deployment=deployment, node_users=node_users)
    check_simulated_nodes(grid, experiment)
    session = RunSession(
        experiment,
        RunDirectory(config.output_dir / config.name), fresh=fresh, checkpoint_each_round=True,
    )
    try:
        return _run_session(grid, session, nodes, registry, on_round)
    finally:
        session.close()


def _run_session(grid: Grid, session: RunSession, nodes: NodeMap | None, registry: UserRegistry | None,
                 on_round: Callable[[dict[str, Any]], None] | None) -> RunResult:
    """:func:`run_on_grid` once its session holds the run directory."""
    experiment, config = session.experiment, session.experiment.config
    if session.finished:
        log(INFO, "fedpub: %s already holds this run, finished; nothing to do", session.run_dir.root)
        return session.finished_result()
    if session.resumed_from is not None:
        log(INFO, "fedpub: resuming from round %d of %d", session.resumed_from, config.rounds)
    log(INFO, "fedpub: randomness %s", experiment.randomness.statement())
    if not experiment.diagnostics:
        log(INFO, "fedpub: diagnostics off (privacy.diagnostics); the run releases only what DP covers")

    def record_round(t, outcome, client_metrics, examples) -> None:
        record = session.record(t, outcome, client_metrics, examples)
        session.start_round()
        if on_round is not None:
            on_round(record)

    strategy = FedpubStrategy(
        session.driver,
        state=session.state,
        public_pool=server_public_pool(experiment, session),
        public_nodes=config.flower.public_users == "nodes" and bool(experiment.strategy.public_cohort),
        first_round=session.rounds_done,
        node_wait_timeout=config.flower.node_wait_timeout,
        on_round=record_round,
        nodes=nodes,
        registry=registry,
        fraction_evaluate=0.0,  # the session evaluates centrally
        diagnostics=experiment.diagnostics,
    )
    session.start_round()
    with without_final_results():  # the session's summary says it once
        strategy.start(
            grid,
            initial_arrays=to_array_record(session.params),
            num_rounds=config.rounds - session.rounds_done,
            timeout=config.flower.round_timeout,
        )  # no evaluate_fn: the session evaluates centrally when it records a round
    return session.finish()


def make_server_app(
    config: ExperimentConfig | None = None,
    *,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    results: list[RunResult | Exception] | None = None,
) -> ServerApp:
    """A ServerApp bound to ``config`` (a simulation) or reading it from the run config (``flwr run``: a
    deployment, see :func:`run_on_grid`); the run's result, or the error a user fixes that stopped it, is appended
    to ``results`` when given (run_simulation returns nothing; :func:`fedpub.simulations.flower.app_errors.run_main`
    says what is logged)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        quiet_flower_logging()
        run_main(lambda: run_on_grid(grid, config or experiment_config(context), fresh=fresh, on_round=on_round,
                                     deployment=config is None), results)

    return app


app = make_server_app()
