"""The Flower ``ServerApp``: builds the experiment, restores or starts its run directory and runs
fedpub's strategy over the connected nodes, writing results exactly as the in-process engine does.

Under ``flwr run`` the experiment is the YAML named by the run config key ``config`` (the bundled
quick-start when empty); the simulation runner binds a config directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedpub.config import ExperimentConfig
from simulations.experiment import build_experiment
from simulations.run_dir import RunDirectory
from simulations.session import RunResult, RunSession
from strategies.flower import FedpubStrategy, to_array_record


def run_on_grid(
    grid: Grid,
    config: ExperimentConfig,
    *,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> RunResult:
    """Run (or resume) ``config`` over the nodes of ``grid``; results go to the run directory."""
    experiment = build_experiment(config)
    in_process_only = [
        what
        for what, used in (
            ("trains public users each round", experiment.strategy.public_cohort),
            ("preconditions the clients' local steps", experiment.strategy.client_preconditioner),
            ("varies the noise by round (budget_schedule)", config.strategy.budget_schedule),
        )
        if used
    ]
    if in_process_only:
        raise ValueError(
            f"strategy `{experiment.strategy.name}` {' and '.join(in_process_only)}, which the Flower backends "
            "do not do yet: run it in-process (fedpub run CONFIG)"
        )
    session = RunSession(
        experiment, RunDirectory(config.output_dir / config.name), fresh=fresh, checkpoint_each_round=True
    )

    def record_round(t, outcome, client_metrics, examples) -> None:
        record = session.record(t, outcome, client_metrics, examples)
        session.start_round()
        if on_round is not None:
            on_round(record)

    strategy = FedpubStrategy(
        experiment.strategy,
        session.accountant,
        state=session.state,
        private_ids=experiment.private_ids,
        planned_round_event=experiment.planned_round_event,
        delta=config.privacy.delta,
        budget_epsilon=experiment.budget_epsilon,
        first_round=session.rounds_done,
        node_wait_timeout=config.flower.node_wait_timeout,
        on_round=record_round,
    )

    session.start_round()
    strategy.start(
        grid,
        initial_arrays=to_array_record(session.params),
        num_rounds=config.rounds - session.rounds_done,
        timeout=config.flower.round_timeout,
    )  # no evaluate_fn: the session evaluates centrally when it records a round
    return session.finish(strategy.stopped_by_budget)


def make_server_app(
    config: ExperimentConfig | None = None,
    *,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    results: list[RunResult] | None = None,
) -> ServerApp:
    """A ServerApp bound to ``config`` (or reading it from the run config); the run's result is
    appended to ``results`` when given (run_simulation returns nothing)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        from clients.client_app import experiment_config

        result = run_on_grid(grid, config or experiment_config(context), fresh=fresh, on_round=on_round)
        if results is not None:
            results.append(result)

    return app


app = make_server_app()
