"""The in-process engine: the round loop of DESIGN.md §3 in one process.

One resident model is trained for each sampled user in turn, its parameters reset in place (no
per-client process, no serialisation). Each round: sample the private cohort (Poisson), train,
aggregate privately through the strategy core, stop before the privacy budget would be exceeded,
compose the round's DP event, evaluate every k rounds and checkpoint atomically. A run directory
with a checkpoint and the same resolved config is resumed, giving the same final model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from clients.local_training import model_params, train_client
from fedpub.config import dump_config
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.ledger import write_ledger
from fedpub.seeding import torch_generator
from fedpub.types import Params
from simulations.evaluation import EvaluationSet, evaluate
from simulations.experiment import Experiment
from simulations.report import write_plot, write_summary
from simulations.run_dir import RunDirectory


class RunDirectoryError(RuntimeError):
    """The run directory holds a different experiment; choose another name or start fresh."""


@dataclass(frozen=True)
class RunResult:
    run_dir: RunDirectory
    params: Params
    rounds_done: int
    epsilon: float
    delta: float
    stopped_by_budget: bool
    final_metrics: dict[str, Any]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def run_in_process(
    experiment: Experiment,
    run_dir: RunDirectory,
    *,
    fresh: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> RunResult:
    """Run (or resume) ``experiment``, writing every result into ``run_dir``."""
    cfg = experiment.config
    resolved = dump_config(cfg)
    stored = run_dir.stored_config()
    if fresh:
        run_dir.clear()
    elif stored is not None and stored != resolved:
        raise RunDirectoryError(
            f"{run_dir.root} holds a run with a different config; use another `name` or --fresh"
        )

    model = experiment.new_model()
    strategy = experiment.strategy
    params = model_params(model)
    state = strategy.init(params)
    accountant = experiment.new_accountant()
    start_round = 0
    checkpoint = None if fresh else run_dir.load_checkpoint()
    if checkpoint is not None:
        params, state = checkpoint["params"], checkpoint["strategy_state"]
        accountant = UserLevelAccountant.from_dict(checkpoint["accountant"])
        start_round = checkpoint["rounds_done"]
        run_dir.truncate_metrics(start_round)
    run_dir.start(resolved)

    delta = cfg.privacy.delta
    budget = cfg.privacy.budget_epsilon
    eval_set = EvaluationSet.pooled(experiment.test, experiment.eval_ids, experiment.device)
    rounds_done, stopped_by_budget = start_round, False
    last_eval: dict[str, Any] = {}
    last_eval_round = -1

    for t in range(start_round, cfg.rounds):
        started = time.perf_counter()
        cohort = strategy.sample_cohort(experiment.private_ids, t)
        results = [
            train_client(
                model,
                params,
                experiment.train.client_data(cid),
                experiment.local_training,
                torch_generator(cfg.seed, t, "client", cid),
            )
            for cid in cohort
        ]
        outcome = strategy.aggregate(params, [r.update for r in results], state, t)
        if budget is not None and accountant.epsilon_if(outcome.event, delta) > budget:
            stopped_by_budget = True  # the round's output is discarded, never released
            break
        accountant.compose(outcome.event)
        params, state, rounds_done = outcome.params, outcome.state, t + 1
        record: dict[str, Any] = {
            "round": t,
            "epsilon": accountant.epsilon(delta),
            "delta": delta,
            **outcome.metrics,
            "train_loss": _mean([r.metrics["train_loss"] for r in results]),
            "train_accuracy": _mean([r.metrics["train_accuracy"] for r in results]),
            "examples": sum(r.num_examples for r in results),
        }
        if rounds_done % cfg.eval_every == 0 or rounds_done == cfg.rounds:
            last_eval, last_eval_round = evaluate(model, params, eval_set), rounds_done
            record.update(last_eval)
        record["wall_time"] = time.perf_counter() - started
        run_dir.append_metrics(record)
        if rounds_done % cfg.checkpoint_every == 0 or rounds_done == cfg.rounds:
            _checkpoint(run_dir, params, state, accountant, rounds_done, delta)
        if on_round is not None:
            on_round(record)

    if last_eval_round != rounds_done:
        last_eval = evaluate(model, params, eval_set)
    _checkpoint(run_dir, params, state, accountant, rounds_done, delta)
    epsilon = accountant.epsilon(delta)
    records = run_dir.read_metrics()
    write_plot(records, run_dir.plot_path)
    write_summary(run_dir.summary_path, experiment, records, last_eval, epsilon, stopped_by_budget)
    return RunResult(run_dir, params, rounds_done, epsilon, delta, stopped_by_budget, last_eval)


def _checkpoint(
    run_dir: RunDirectory,
    params: Params,
    state: Any,
    accountant: UserLevelAccountant,
    rounds_done: int,
    delta: float,
) -> None:
    run_dir.save_checkpoint(
        {
            "rounds_done": rounds_done,
            "params": {k: v.detach().cpu() for k, v in params.items()},
            "strategy_state": state,
            "accountant": accountant.to_dict(),
            "torch_version": torch.__version__,
        }
    )
    write_ledger(run_dir.ledger_path, accountant, delta)
