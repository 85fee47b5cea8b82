"""Fault injection for the fault-tolerance suite (``test_faults.py``): the one place that says how a fault is made.

A :class:`FaultPlan` names, for (round, user id), what goes wrong with that user's reply:

``raise``
    its local training raises. In process the user's images have the wrong shape, so the model itself raises
    inside the cohort trainer (in a vectorised group or in the per-client loop); in Flower the ClientApp raises.
``hang``
    its reply comes too late. In process the user holds :data:`SLOW_USER_COPIES` copies of its data, so its
    local training runs far past ``client.timeout_s``; in Flower the ClientApp sleeps past ``flower.round_timeout``.
``nan``, ``inf``, ``shape``, ``keys``, ``dtype``
    its update is corrupted after training (:func:`corrupted`): a NaN, an Inf, a tensor of the wrong shape, a
    parameter under another name, float64 instead of float32. In process the cohort trainer's result is
    corrupted; in Flower the reply's ``ArrayRecord``.
``malformed``
    the reply has no ``update`` record (Flower only: in process there is no reply).

Processes are faulted by SIGKILL instead: a SuperNode or the ServerApp of a real deployment (in the test), an
in-process run at a chosen point (``python -m tests.simulations.faults CONFIG.yaml POINT ROUND``, see :func:`main`),
or one of torchrun's ranks while it trains a round (``torchrun ... -m tests.simulations.faults torchrun RANK ROUND
CONFIG...``, see :func:`torchrun_main`).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from fedpub.clients.cohort_training import CohortTrainer
from fedpub.clients.local_training import ClientResult
from fedpub.config import ExperimentConfig
from fedpub.data.base import ClientData, FederatedDataset
from fedpub.types import Updates
from fedpub.simulations.run.experiment import Experiment

if TYPE_CHECKING:
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp

CORRUPTIONS = ("nan", "inf", "shape", "keys", "dtype")
SLOW_USER_COPIES = 6000
"""A ``hang`` user's data, repeated: thousands of local steps (about a minute on 2 busy CPU cores) instead of a few."""
KINDS = ("raise", "hang", "malformed", *CORRUPTIONS)


class InjectedFault(RuntimeError):
    """The error of a ``raise`` fault in a ClientApp."""


def corrupted(update: Updates, kind: str) -> Updates:
    """``update`` with one fault of ``kind`` (one of :data:`CORRUPTIONS`)."""
    name = sorted(update)[0]
    out = {k: v.clone() for k, v in update.items()}
    if kind == "nan":
        out[name].view(-1)[0] = float("nan")
    elif kind == "inf":
        out[name].view(-1)[-1] = float("inf")
    elif kind == "shape":
        out[name] = torch.zeros(out[name].numel() + 1)
    elif kind == "keys":
        out[name + ".renamed"] = out.pop(name)
    elif kind == "dtype":
        out[name] = out[name].double()
    else:
        raise ValueError(f"not a corruption: {kind!r}")
    return out


@dataclass(frozen=True)
class FaultPlan:
    """``faults[(round, user id)]`` = the fault kind of that user's reply in that round."""

    faults: Mapping[tuple[int, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.faults.values()) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {KINDS}")

    def kind(self, round_index: int, client_id: str) -> str | None:
        return self.faults.get((round_index, client_id))

    def failed(self, round_index: int) -> int:
        """How many users fail in round ``round_index``."""
        return sum(1 for (t, _) in self.faults if t == round_index)


# -- in process ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _FaultyData(ClientData):
    """A user's data carrying the fault of its reply (``raise`` already made its images the wrong shape)."""

    fault: str = ""


class _FaultyUsers:
    """The private (or public) users of an experiment, each handing out its data with the fault the plan gives it now."""

    def __init__(self, users: FederatedDataset, injector: InProcessFaults) -> None:
        self._users, self._injector = users, injector
        self.client_ids, self.num_classes = users.client_ids, users.num_classes

    def num_examples(self, client_id: str) -> int:
        return self._users.num_examples(client_id)

    def client_data(self, client_id: str) -> ClientData:
        data = self._users.client_data(client_id)
        kind = self._injector.plan.kind(self._injector.round, client_id)
        if kind is None:
            return data
        if kind == "malformed":
            raise ValueError("`malformed` is a fault of Flower replies; the in-process engine has none")
        if kind == "hang":
            return _FaultyData(torch.cat([data.x] * SLOW_USER_COPIES), torch.cat([data.y] * SLOW_USER_COPIES), kind)
        x = data.x[..., :5, :5] if kind == "raise" else data.x  # images of the wrong size: the model raises
        return _FaultyData(x, data.y, fault=kind)


class InProcessFaults:
    """Injects ``plan`` into an in-process run: :meth:`experiment` wraps the users' data, :meth:`on_round`
    (the engine's ``on_round``) tells it which round runs next, and the cohort trainer's results of users with a
    corruption fault are corrupted (``monkeypatch`` wraps :meth:`CohortTrainer.train`)."""

    def __init__(self, plan: FaultPlan, monkeypatch: Any, first_round: int = 0) -> None:
        self.plan, self.round = plan, first_round
        original = CohortTrainer.train

        def train(trainer: CohortTrainer, params: Any, datas: Any, generators: Any, **kwargs: Any) -> list:
            results = original(trainer, params, datas, generators, **kwargs)
            return [
                dataclasses.replace(r, update=corrupted(r.update, d.fault))
                if isinstance(d, _FaultyData) and d.fault in CORRUPTIONS and isinstance(r, ClientResult) else r
                for d, r in zip(datas, results, strict=True)
            ]

        monkeypatch.setattr(CohortTrainer, "train", train)

    def experiment(self, experiment: Experiment) -> Experiment:
        """``experiment`` whose private and public users hand out their data with their faults."""
        return dataclasses.replace(
            experiment, train=_FaultyUsers(experiment.train, self), public_data=_FaultyUsers(experiment.public_data, self)
        )

    def on_round(self, record: Mapping[str, Any]) -> None:
        self.round = int(record["round"]) + 1


# -- Flower ----------------------------------------------------------------------------------------------------
def faulty_client_app(config: ExperimentConfig, plan: FaultPlan, hang_seconds: float) -> ClientApp:
    """fedpub's ClientApp for ``config``, whose replies fail as ``plan`` says (``hang`` sleeps ``hang_seconds``)."""
    from flwr.app import ArrayRecord, Message, RecordDict
    from flwr.clientapp import ClientApp

    from fedpub.clients.client_app import query_reply, train_reply
    from fedpub.strategies.flower import to_tensors

    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return query_reply(msg, context, config)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        asked = msg.content["config"]
        kind = plan.kind(int(asked["round"]), str(asked["client-id"]))
        if kind == "raise":
            raise InjectedFault(f"injected failure of {asked['client-id']} in round {asked['round']}")
        if kind == "hang":
            time.sleep(hang_seconds)
        reply = train_reply(msg, context, config)
        if kind == "malformed":
            return Message(RecordDict({k: v for k, v in reply.content.items() if k != "update"}), reply_to=msg)
        if kind in CORRUPTIONS:
            reply.content["update"] = ArrayRecord(torch_state_dict=corrupted(to_tensors(reply.content["update"]), kind))
        return reply

    return app


# -- a run killed at a chosen point (run as a subprocess) ------------------------------------------------------
KILL_POINTS = ("round_end", "training", "after_metrics", "writing_checkpoint")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    """``CONFIG.yaml POINT ROUND``: run (or resume) the config in process and SIGKILL this process in round ROUND:
    ``round_end`` after its checkpoint, ``training`` while its cohort trains, ``after_metrics`` once its metrics
    record is written (before its checkpoint), ``writing_checkpoint`` halfway through writing its checkpoint."""
    from fedpub.config import load_config
    from fedpub.simulations.run import run_dir
    from fedpub.simulations.run.engine import run_in_process
    from fedpub.simulations.run.experiment import build_experiment
    from fedpub.simulations.run.session import RunSession

    path, point, kill_round = argv[0], argv[1], int(argv[2])
    if point not in KILL_POINTS:
        raise SystemExit(f"POINT must be one of {KILL_POINTS}")
    cfg = load_config(path)
    current = {"round": -1}
    start_round = RunSession.start_round

    def start(session: RunSession) -> None:
        current["round"] = session.rounds_done
        start_round(session)

    RunSession.start_round = start  # type: ignore[method-assign]
    train = CohortTrainer.train

    def train_or_die(*args: Any, **kwargs: Any) -> Any:
        if point == "training" and current["round"] == kill_round:
            _die()
        return train(*args, **kwargs)

    CohortTrainer.train = train_or_die  # type: ignore[method-assign]
    append = run_dir.RunDirectory.append_metrics

    def append_then_die(self: run_dir.RunDirectory, record: Mapping[str, Any]) -> None:
        append(self, record)
        if point == "after_metrics" and record["round"] == kill_round:
            _die()

    run_dir.RunDirectory.append_metrics = append_then_die  # type: ignore[method-assign]
    save = torch.save

    def save_half_then_die(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        if point == "writing_checkpoint" and isinstance(obj, dict) and obj.get("rounds_done") == kill_round + 1:
            save(obj, f, *args, **kwargs)
            with open(f, "r+b") as written:
                written.truncate(os.path.getsize(f) // 2)
                written.flush()
                os.fsync(written.fileno())
            _die()
        save(obj, f, *args, **kwargs)

    run_dir.torch.save = save_half_then_die  # type: ignore[assignment]
    on_round: Callable[[Mapping[str, Any]], None] = (
        (lambda record: _die() if record["round"] == kill_round else None) if point == "round_end" else lambda _: None
    )
    run_in_process(build_experiment(cfg), run_dir.RunDirectory(cfg.output_dir / cfg.name), on_round=on_round)


def torchrun_main(argv: list[str]) -> None:
    """``RANK ROUND CONFIG...``, as one of torchrun's ranks: ``fedpub run`` each CONFIG in turn in one gloo process
    group, this process SIGKILLed while it trains round ROUND when its rank is RANK (-1: never). Exits as the first
    failing run does."""
    import torch.distributed as dist

    from fedpub.round_driver import RoundDriver
    from fedpub.simulations.tools.cli import app

    dist.init_process_group("gloo")  # once: the runs use it (a group joined again may meet the last one's addresses)

    kill_rank, kill_round = int(argv[0]), int(argv[1])
    if int(os.environ["RANK"]) == kill_rank:
        current = {"round": -1}
        plan, train = RoundDriver.plan, CohortTrainer.train

        def plan_round(driver: RoundDriver, round_index: int, *args: Any) -> Any:
            current["round"] = round_index
            return plan(driver, round_index, *args)

        def train_or_die(*args: Any, **kwargs: Any) -> Any:
            if current["round"] == kill_round:
                _die()
            return train(*args, **kwargs)

        RoundDriver.plan = plan_round  # type: ignore[method-assign]
        CohortTrainer.train = train_or_die  # type: ignore[method-assign]
    try:
        for config in argv[2:]:
            code = app(["run", config], standalone_mode=False)  # typer.Exit's code, returned
            if code:
                sys.exit(code)
    finally:  # left to the interpreter's exit, gloo's threads may abort the process (SIGABRT after the last run)
        dist.destroy_process_group()


if __name__ == "__main__":
    torchrun_main(sys.argv[2:]) if sys.argv[1:2] == ["torchrun"] else main(sys.argv[1:])
