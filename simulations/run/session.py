"""The bookkeeping of one run, shared by every backend (in-process, Flower simulation, deployment).

A :class:`RunSession` restores a checkpointed run (or starts a new one), holds the global model,
the strategy state, the accountant and the :class:`~fedpub.round_driver.RoundDriver` over them, and after each
round writes the metrics record, evaluates every k rounds and checkpoints atomically; at the end it writes the
ledger, plot and summary. The backends only deliver the driver's plans and bring the replies back.

What a round writes is split by what DP covers: ``metrics.jsonl`` is released (ε, the noised and public
statistics, the evaluation), ``diagnostics.jsonl`` holds the un-noised statistics of the private users (realised
cohort, failures, norms, training loss, examples, wall time), outside the guarantee and written only when the
experiment asks for diagnostics. The released records alone also go to the config's trackers
(:mod:`fedpub.simulations.run.tracking`). A secret privacy seed (:mod:`fedpub.privacy.randomness`) is checkpointed
before the first release, so a resumed run draws the same noise and cohorts; the checkpoint is server-private.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import yaml

from fedpub.clients.cohort_training import CohortTrainer
from fedpub.clients.public_training import PooledPublicTrainer
from fedpub.config import dump_config
from fedpub.data import registry
from fedpub.models.seeded import model_params
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.ledger import write_ledger
from fedpub.privacy.randomness import PrivacyRandomness
from fedpub.run_phases import RunPhases
from fedpub.strategy import RoundOutcome
from fedpub.types import Params
from fedpub.simulations.run.evaluation import EvaluationSet, evaluate
from fedpub.simulations.run.experiment import Experiment
from fedpub.simulations.run.report import write_plot, write_summary
from fedpub.simulations.run.run_dir import RunDirectory, RunDirectoryError
from fedpub.simulations.run.run_lock import RunLock
from fedpub.simulations.run.tracking import Trackers


class RunInterrupted(Exception):
    """The run was asked to stop (Ctrl-C, SIGTERM) and stopped at the end of a round, checkpointed: nothing in the
    run directory is ahead of the checkpoint; running the same config again resumes it."""

    def __init__(self, run_dir: RunDirectory, rounds_done: int, rounds: int) -> None:
        super().__init__(f"interrupted after {rounds_done} of {rounds} rounds, checkpointed in {run_dir.root}")
        self.run_dir, self.rounds_done, self.rounds = run_dir, rounds_done, rounds


@dataclass(frozen=True)
class RunResult:
    run_dir: RunDirectory
    params: Params
    rounds_done: int
    epsilon: float
    delta: float
    stopped_by_budget: bool
    final_metrics: dict[str, Any]
    already_finished: bool = False
    """The directory held this run finished: nothing was trained or rewritten (the figures are its files')."""


def changed_keys(stored: Any, resolved: Any, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two configs (as mappings)."""
    if not (isinstance(stored, dict) and isinstance(resolved, dict)):
        return [] if stored == resolved else [prefix.rstrip(".") or "(the whole config)"]
    keys = list(dict.fromkeys([*stored, *resolved]))
    return [k for key in keys for k in changed_keys(stored.get(key), resolved.get(key), f"{prefix}{key}.")]


def run_changes(stored: str, resolved: str) -> list[str]:
    """How a run directory's ``config.yaml`` (``stored``) differs from the config resolved now in what the run
    computes: the changed dotted keys, or ``["its layout"]`` when only the text differs; empty for the same run.
    Not part of it: ``tracking`` (where the released records are also sent may change when a run resumes),
    ``output_dir`` (where the runs are written: a folder of runs moved elsewhere resumes there, a reproduction's
    too), and the ``data`` sections of the datasets other than the run's (a ``config.yaml`` written before the
    resolved config left them out holds them)."""
    if stored == resolved:
        return []
    now = yaml.safe_load(resolved)
    changed = changed_keys(yaml.safe_load(stored), now)
    if not changed:
        return ["its layout"]
    own = registry.source(now["data"]["source"])[0].config_fields
    others = {f"data.{name}" for name in registry.data_fields() if name not in own}
    return [key for key in changed
            if key.split(".")[0] not in ("tracking", "output_dir") and ".".join(key.split(".")[:2]) not in others]


CHECKPOINT_FIELDS = ("rounds_done", "params", "strategy_state", "accountant", "privacy_randomness", "population",
                     "config")
"""What :meth:`RunSession.checkpoint` writes and a resume reads (besides the optional ``model_average`` and
``record``)."""


def check_checkpoint_config(run_dir: RunDirectory, checkpoint: Mapping[str, Any], resolved: str) -> None:
    """Refuse (RunDirectoryError, naming the file) a checkpoint that lacks a field a resume reads, or that a run of
    another config wrote: the dotted keys that differ from ``resolved`` in what the run computes (:func:`run_changes`;
    ``tracking`` may change)."""
    path = run_dir.checkpoint_path
    missing = [field for field in CHECKPOINT_FIELDS if field not in checkpoint]
    if missing or not isinstance(checkpoint["config"], str) or not isinstance(checkpoint["params"], dict):
        what = f"it lacks {', '.join(missing)}" if missing else "its config or params are not what fedpub writes"
        raise RunDirectoryError(
            f"{path} is not a checkpoint of this fedpub ({what}): an older fedpub or another program wrote it; "
            "remove it or use --fresh"
        )
    changed = run_changes(checkpoint["config"], resolved)
    if changed:
        raise RunDirectoryError(
            f"{path} was written by a run of another config (changed: {', '.join(changed)}); it cannot resume this "
            "run: remove it, use another `name`, or --fresh"
        )


def checkpoint_accountant(
    run_dir: RunDirectory, checkpoint: Mapping[str, Any], fresh: UserLevelAccountant, planned: Callable[[int], Any],
    delta: float,
) -> UserLevelAccountant:
    """The accountant a checkpoint holds, refused (RunDirectoryError, naming the file) unless it can be the one
    this run composed: the same kind, neighbouring relation and discretisation as ``fresh`` (the config's), one
    round composed per round done, and ε at ``delta`` at least what the planned events of those rounds cost
    (``planned(rounds)``: their composed event). An emptied or edited accountant would make every ε from then on
    under-report what the mechanism ran, so it is never resumed."""
    path = run_dir.checkpoint_path
    fix = "remove it (the run restarts from round 0) or use --fresh"
    try:
        stored = UserLevelAccountant.from_dict(checkpoint["accountant"])
    except (KeyError, TypeError, ValueError) as error:  # PrivacyError is a ValueError
        raise RunDirectoryError(f"{path}: its accountant cannot be read ({type(error).__name__}): {fix}") from None
    kind = (stored.accountant, stored.neighboring_relation, stored.pld_discretization)
    if kind != (fresh.accountant, fresh.neighboring_relation, fresh.pld_discretization):
        raise RunDirectoryError(f"{path}: its accountant is not this run's (privacy.accountant and its settings "
                                f"differ): {fix}")
    done = checkpoint["rounds_done"]
    if isinstance(done, bool) or not isinstance(done, int) or stored.rounds != done:
        raise RunDirectoryError(f"{path}: its accountant composed {stored.rounds} rounds but the checkpoint says "
                                f"{done} were run: the file was edited; {fix}")
    spent, floor = stored.epsilon(delta), (fresh.epsilon_if(planned(done), delta) if done else 0.0)
    if spent < floor * (1 - 1e-6):
        raise RunDirectoryError(
            f"{path}: its accountant prices the {done} rounds run at ε = {spent:.6g}, below the ε = {floor:.6g} their "
            f"planned events cost: it was emptied or edited, and resuming would under-report ε; {fix}"
        )
    return stored


_NAMED_PARAMS = 8
"""How many differing parameters a refused checkpoint's error names (a model has hundreds)."""


def check_checkpoint_params(run_dir: RunDirectory, stored: Mapping[str, Any], params: Params) -> None:
    """Refuse (RunDirectoryError, naming the file and the first parameters that differ) a checkpoint's model
    ``stored`` whose parameter names, shapes or dtypes are not the model's (``params``)."""

    def described(value: Any) -> str:
        if not isinstance(value, torch.Tensor):
            return type(value).__name__
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"

    differ = [
        f"{name} ({'absent' if name not in stored else described(stored[name])} in the checkpoint, "
        f"{'absent' if name not in params else described(params[name])} in the model)"
        for name in dict.fromkeys([*params, *stored])
        if name not in stored or name not in params or described(stored[name]) != described(params[name])
    ]
    if differ:
        named = "; ".join(differ[:_NAMED_PARAMS]) + (
            f"; and {len(differ) - _NAMED_PARAMS} more" if len(differ) > _NAMED_PARAMS else ""
        )
        raise RunDirectoryError(
            f"{run_dir.checkpoint_path} holds another model than this run's: {named}; remove it, use another `name`, "
            "or --fresh"
        )


def _means(metrics: Sequence[Mapping[str, float]], keys: Sequence[str]) -> dict[str, float]:
    """The mean of each of ``keys`` over the ``metrics`` that hold it; a key none holds (every user failed) is left
    out, never written as NaN."""
    out = {}
    for k in keys:
        values = [m[k] for m in metrics if k in m]
        if values:
            out[k] = sum(values) / len(values)
    return out


class RunSession:
    """Restore-or-start, then :meth:`record` each round and :meth:`finish` once."""

    def __init__(
        self, experiment: Experiment, run_dir: RunDirectory, *, fresh: bool = False, checkpoint_each_round: bool = False
    ) -> None:
        """``checkpoint_each_round`` (the Flower backends, whose replies can differ when a round is redone):
        every round is checkpointed before its metrics are released, so a resumed run never redoes a round
        whose results were released (a redo reuses the round's noise: two releases with different surviving
        users and the same noise would leak their difference). In-process a redo is bit-identical.

        The session holds the directory's lock (:class:`~fedpub.simulations.run.run_lock.RunLock`) from here until
        :meth:`close` (which :meth:`finish` calls): a second session of the same directory, in this process or
        another, is refused with :class:`~fedpub.simulations.run.run_lock.RunDirectoryLocked` naming the holder."""
        self._lock = RunLock(run_dir.root).acquire()
        self._started = False
        self._trainer: CohortTrainer | None = None
        self._timed_before = 0
        self._saved_paths: dict[str, Any] = {}
        self._trackers = Trackers(experiment.config.tracking)
        try:
            self._restore(experiment, run_dir, fresh=fresh, checkpoint_each_round=checkpoint_each_round)
        except BaseException:
            self.close()
            raise

    def _restore(
        self, experiment: Experiment, run_dir: RunDirectory, *, fresh: bool, checkpoint_each_round: bool
    ) -> None:
        cfg = experiment.config
        resolved = dump_config(cfg)
        stored = run_dir.stored_config()
        changed = [] if fresh or stored is None else run_changes(stored, resolved)
        if changed:
            raise RunDirectoryError(
                f"{run_dir.root} holds a run with a different config (changed: {', '.join(changed)}); use another "
                "`name` or --fresh"
            )
        checkpoint = None if fresh else run_dir.load_checkpoint()
        if checkpoint is not None:
            check_checkpoint_config(run_dir, checkpoint, resolved)
            if checkpoint["population"] != experiment.strategy.population:
                raise RunDirectoryError(
                    f"{run_dir.root} was checkpointed with N = {checkpoint['population']} private users, but "
                    f"{experiment.strategy.population} take part now (nodes that registered): its sampling rate and "
                    "accounting assume the first N; bring the same nodes back, or start a new run (--fresh)"
                )
            experiment = experiment.with_randomness(PrivacyRandomness.from_dict(checkpoint["privacy_randomness"]))
        self.experiment, self.run_dir = experiment, run_dir
        """The experiment, with a resumed run's privacy randomness (its checkpoint's)."""
        self._fresh, self._resolved = fresh, resolved
        self._restored = checkpoint is not None
        self._checkpoint_each_round = checkpoint_each_round
        self._unreleased: dict[str, Any] | None = None  # a checkpointed round's records not yet written
        self.model = experiment.new_model()
        self.params = model_params(self.model)
        self.state = experiment.strategy.init(self.params)
        self.accountant = experiment.new_accountant()
        self.rounds_done = 0
        self.phases = RunPhases.from_config(cfg.strategy)
        """The recipe's run phases: warm start, the model average, model reuse."""
        self.public_trainer = PooledPublicTrainer(
            self.model, experiment.public_data, experiment.public_ids, experiment.task, cfg.seed
        )
        self.average = self.phases.init_average()
        self.public_metrics: dict[str, float] = {}
        """The run phases' metrics not yet written (``warm_start/...`` go into the first round's record)."""
        if checkpoint is not None:
            check_checkpoint_params(run_dir, checkpoint["params"], self.params)
            self.params, self.state = checkpoint["params"], checkpoint["strategy_state"]
            self.accountant = checkpoint_accountant(run_dir, checkpoint, self.accountant,
                                                    experiment.strategy.planned_event, cfg.privacy.delta)
            self.rounds_done = checkpoint["rounds_done"]
            self.average = checkpoint.get("model_average", self.average)
            self._unreleased = checkpoint.get("record")
        else:
            self.params, self.public_metrics = self.phases.before_rounds(self.params, self.public_trainer)
        self.driver = experiment.round_driver(self.accountant)
        """Plans each round and finishes it from the replies: the budget rule and the accountant's composition."""
        self.eval_set = EvaluationSet.pooled(experiment.test, experiment.eval_users.ids, experiment.device)
        self.val_set = (EvaluationSet.pooled(experiment.train, experiment.validation_ids, experiment.device)
                        if experiment.validation_ids else None)
        """The validation users' training examples (never trained on: they are not in N), or None."""
        self.last_eval: dict[str, float] = {}
        self.last_eval_round = -1
        self._round_started = time.perf_counter()

    def _start(self) -> None:
        """Write the run directory (with --fresh, cleared first) when the first results are ready, so a run
        that fails before then (a corrupt data file, a failed first round) leaves no directory behind and an
        existing one as it was. Metrics past the checkpoint are dropped: those rounds run again."""
        if self._started:
            return
        if self._fresh:
            self.run_dir.clear()
        self.run_dir.start(self._resolved)
        self.run_dir.truncate_records(self.rounds_done)
        self._trackers.start(self.run_dir, self.experiment.config, self.rounds_done)
        if self._unreleased is not None and len(self.run_dir.read_metrics()) == self.rounds_done - 1:
            self._write(self._unreleased)  # checkpointed, then killed before its release
        self._started = True
        if self.experiment.randomness.secret and not self._restored:
            self.checkpoint()  # the secret seed, before anything drawn from it is released

    @property
    def resumed_from(self) -> int | None:
        """The round a restored run goes on from (its checkpoint's rounds done); None for a new run."""
        return self.rounds_done if self._restored else None

    @property
    def finished(self) -> bool:
        """Whether the directory holds this run finished (restored, its summary written by :meth:`finish`)."""
        return self._restored and self.run_dir.holds_finished_run()

    def finished_result(self) -> RunResult:
        """The result of a :attr:`finished` run, from its files and checkpoint; nothing is trained or written."""
        released = self.run_dir.load_released_params() or self.params
        final = self.run_dir.read_final_metrics() or {}
        self.close()
        return RunResult(
            self.run_dir, released, self.rounds_done, self.accountant.epsilon(self.delta), self.delta,
            self.rounds_done < self.experiment.config.rounds, dict(final), already_finished=True,
        )

    def drop_records_past_checkpoint(self) -> None:
        """After a round was cut short (a second Ctrl-C, an error): remove the metrics and diagnostics records of
        the rounds the checkpoint on disk does not hold, so the directory is never ahead of its checkpoint."""
        if not self._started:
            return
        checkpoint = self.run_dir.load_checkpoint()
        self.run_dir.truncate_records(0 if checkpoint is None else checkpoint["rounds_done"])

    def checkpoint_if_started(self) -> None:
        """Checkpoint the last finished round, when this session has written anything (else the directory
        already holds it)."""
        if self._started:
            self.checkpoint()

    def close(self) -> None:
        """Close the trackers still open (a run stopped before its end) and release the directory's lock (a run
        that wrote nothing leaves no directory behind)."""
        self._trackers.close()
        self._lock.release(remove_empty=not self._started)

    @property
    def delta(self) -> float:
        return self.experiment.config.privacy.delta

    def start_round(self) -> None:
        self._round_started = time.perf_counter()

    def _reports_epsilon(self) -> bool:
        """Whether this round's record carries ε besides evaluation rounds (privacy.epsilon_every, or free
        because the budget check priced the round already)."""
        every = self.experiment.config.privacy.epsilon_every
        return self.experiment.budget_epsilon is not None or (every is not None and self.rounds_done % every == 0)

    def record(
        self,
        round_index: int,
        outcome: RoundOutcome,
        client_metrics: Sequence[Mapping[str, float]],
        examples: int,
    ) -> dict[str, Any]:
        """Adopt the round's outcome (finished by :attr:`driver`, its event composed), write its metrics
        record (and diagnostics record), evaluate and checkpoint when due; return the metrics record with the
        diagnostics under ``diagnostics`` (for the caller's progress display, not a file). After a round that makes every sampled user
        fail ``stop_after_failed_rounds`` times in a row: checkpoint and raise
        :class:`~fedpub.round_driver.CohortsKeepFailing`
        (like any crash the stop itself is outside the DP guarantee; the rounds released before it are all in
        the ledger)."""
        self._start()
        cfg = self.experiment.config
        self.params, self.state, self.rounds_done = outcome.params, outcome.state, round_index + 1
        headline = self.experiment.task.headline
        evaluates = self.rounds_done % cfg.eval_every == 0 or self.rounds_done == cfg.rounds
        record: dict[str, Any] = {"round": round_index}
        if evaluates or self._reports_epsilon():
            record["epsilon"] = self.accountant.epsilon(self.delta)
        record |= {"delta": self.delta, **outcome.metrics, **self.public_metrics}
        self.public_metrics = {}
        self.average = self.phases.update_average(self.average, self.params)
        if evaluates:
            record.update(self._evaluate(), evaluated_on=self.experiment.eval_users.label)
        diagnostics = {
            "round": round_index,
            **outcome.diagnostics,
            **_means(client_metrics, ("train_loss", f"train_{headline}")),
            "examples": examples,
            "wall_time": time.perf_counter() - self._round_started,
            **self._groups_timed(),
        }
        records = {"metrics": record, "diagnostics": diagnostics}
        self._save_path_choices()
        if self._checkpoint_each_round:
            self.checkpoint(records)
            self._write(records)
        else:
            self._write(records)
            if self.rounds_done % cfg.checkpoint_every == 0 or self.rounds_done == cfg.rounds:
                self.checkpoint()
        if self.driver.keeps_failing:
            self.checkpoint()
            raise self.driver.cohorts_keep_failing(
                round_index, "checkpointed; fix the cause and run the same config again to resume"
            )
        return {**record, "diagnostics": diagnostics}

    def cohort_trainer(self, log: Callable[[str], None] | None = None) -> CohortTrainer:
        """The experiment's cohort trainer on the session's model, given the path choices a resumed run made
        (``paths.json``; none when fresh). Each :meth:`record` saves its choices when they changed, so a resumed
        run, in-process or on a ServerApp training the public users, trains as the first one did."""
        stored = None if self._fresh else self.run_dir.load_paths()
        self._trainer = self.experiment.cohort_trainer(self.model, stored=stored, log=log)
        self._saved_paths = self._trainer.choices()
        return self._trainer

    def _groups_timed(self) -> dict[str, int]:
        """``groups_timed``: the groups of this round trained both ways to time the paths (its ``wall_time``
        holds both paths' work for them); nothing when the session trains no cohort."""
        if self._trainer is None:
            return {}
        timed, self._timed_before = self._trainer.groups_timed - self._timed_before, self._trainer.groups_timed
        return {"groups_timed": timed}

    def _save_path_choices(self) -> None:
        if self._trainer is not None and (choices := self._trainer.choices()) != self._saved_paths:
            self.run_dir.save_paths(choices)
            self._saved_paths = choices

    def _write(self, records: Mapping[str, dict[str, Any]]) -> None:
        """A round's released record (also to the trackers), and its diagnostics when the experiment writes them."""
        self.run_dir.append_metrics(records["metrics"])
        self._trackers.log(records["metrics"])
        if self.experiment.diagnostics:
            self.run_dir.append_diagnostics(records["diagnostics"])

    def _evaluate(self, params: Params | None = None) -> dict[str, float]:
        """Evaluate ``params`` (the global model) and, when configured, the averaged model (``avg_``), on the test
        examples (``eval_*``) and on the validation users' (``val_*``, when there are validation users)."""
        self.last_eval = self._evaluate_params(self.params if params is None else params)
        averaged = self.phases.averaged(self.average)
        if averaged is not None:
            self.last_eval.update({f"avg_{k}": v for k, v in self._evaluate_params(averaged).items()})
        self.last_eval_round = self.rounds_done
        return self.last_eval

    def _evaluate_params(self, params: Params) -> dict[str, float]:
        task = self.experiment.task
        metrics = evaluate(self.model, params, self.eval_set, task)
        if self.val_set is not None:
            validation = evaluate(self.model, params, self.val_set, task)
            metrics.update({f"val_{k.removeprefix('eval_')}": v for k, v in validation.items()})
        return metrics

    def checkpoint(self, records: dict[str, Any] | None = None) -> None:
        """The ledger, then the checkpoint, each written atomically: a crash between the two leaves a ledger
        that counts the round the checkpoint lacks (ε over-, never under-stated); resuming redoes that round
        with the same seeds and writes both again. ``records``: the round's metrics and diagnostics records,
        written after. The checkpoint holds the privacy seed and the generators' states: server-private."""
        write_ledger(
            self.run_dir.ledger_path, self.accountant, self.delta, randomness=self.experiment.randomness.statement()
        )
        self.run_dir.save_checkpoint(
            {
                "rounds_done": self.rounds_done,
                "params": {k: v.detach().cpu() for k, v in self.params.items()},
                "strategy_state": self.state,
                "accountant": self.accountant.to_dict(),
                "model_average": self.average,
                "privacy_randomness": self.experiment.randomness.to_dict(),
                "population": self.experiment.strategy.population,
                "torch_version": str(torch.__version__),  # a plain str: TorchVersion is no plain data
                "config": self._resolved,
                "record": records,
            }
        )

    def finish(self) -> RunResult:
        """Final evaluation (if the last round had none), checkpoint, ledger, plot and summary."""
        self._start()
        if self.last_eval_round != self.rounds_done:
            self._evaluate()
        self.checkpoint()
        released = self.params
        if self.phases.model_reuse is not None:  # post-processing on public data; the checkpoint keeps the private w_T
            private_eval = {f"private_{k}": v for k, v in self.last_eval.items()}
            released, reuse_metrics = self.phases.after_rounds(self.params, self.public_trainer)
            self._evaluate(released)
            self.last_eval.update({**private_eval, **reuse_metrics})
            self.run_dir.save_released_params(released)
        final_metrics = {**self.last_eval, "evaluated_on": self.experiment.eval_users.label}
        self.run_dir.save_final_metrics(final_metrics)
        epsilon = self.accountant.epsilon(self.delta)
        records = self.run_dir.read_metrics()
        write_plot(records, self.run_dir.plot_path, self.experiment.task.headline, self.experiment.eval_users.label)
        write_summary(
            self.run_dir.summary_path, self.experiment, records, self.last_eval, epsilon, self.driver.stopped_by_budget
        )
        final = {**final_metrics, "epsilon": epsilon, "delta": self.delta}
        self._trackers.finish(self.rounds_done - 1, {f"final/{k}": v for k, v in final.items()})
        self.close()
        return RunResult(
            self.run_dir, released, self.rounds_done, epsilon, self.delta, self.driver.stopped_by_budget,
            self.last_eval,
        )
