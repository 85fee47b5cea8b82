"""One run's rounds shared by the ranks of ``torchrun`` (docs/design.md §9: the round cut at the sum, on many workers).

``torchrun --nproc-per-node N -m fedpub.simulations run CONFIG`` starts N processes (on many machines with
torchrun's own rendezvous); each finds its rank in torchrun's environment (:func:`launched`) and joins one process
group (:class:`Workers`): gloo on CPUs, NCCL when the run's device is CUDA, one GPU per rank (``cuda:LOCAL_RANK``).

Every rank builds the same experiment and strategy and draws the same cohorts: rank 0's privacy seed (a secret one
is drawn there, sent to the other ranks in memory and written only into rank 0's server-private checkpoint), its
model and strategy state (a resumed or warm-started run's) and its accountant are broadcast when the run opens.
Each round every rank trains its share of the private and of the public cohort (:func:`split_by_work`: largest
users first, each to the least-loaded rank), the public updates are gathered by every rank (they cost no privacy;
the round's preparation, e.g. DOPE's center or AdaDPS's statistics, is then computed from them on every rank), each
rank runs the per-user part of the recipe on its own rows (:meth:`~fedpub.strategy.StrategyCore.per_user`), and the
sums and the per-user tallies (adaptive clipping's bits) are all-reduced (:meth:`Workers.all_reduce_sum`).

The noise is drawn once, by the same seeded draw on every rank: every rank finishes the round from the same
all-reduced sum (:meth:`~fedpub.round_driver.RoundDriver.finish_from_sum`), so every rank holds the same model,
strategy state and accountant, and agrees on the budget rule without another message; drawing on rank 0 and
broadcasting would send a model-sized tensor each round to save a draw each rank can make while it waits. Each
round starts by comparing a fingerprint of every rank's model (a rank whose arithmetic differed stops the run:
:class:`RanksDiverged`) and by agreeing on a stop (Ctrl-C, SIGTERM on any rank stops every rank at the same
round's end). ε and the ledger are the one-process run's; the model is within float rounding of it (the sum is
formed in another order).

Rank 0 alone holds the run directory (:class:`RootSession`: it writes, evaluates, checkpoints, runs the warm start,
the model average and model reuse); the other ranks hold a :class:`FollowerSession`, which writes nothing. Resuming
is rank 0 reading its checkpoint and broadcasting it. A rank that stops (an error, a kill) makes the others' next
collective fail: they stop with :class:`WorkerLost` (its own error line, or torchrun's failure report, names the
rank), and rank 0 leaves nothing past its last checkpoint, as any failed in-process run does.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from fedpub.clients.cohort_training import CohortTrainer
from fedpub.clients.round_training import train_cohorts
from fedpub.data.base import FederatedDataset
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.randomness import PrivacyRandomness
from fedpub.round_driver import NoisyBeyondSignal, PublicUpdateRefused, RoundDriver, RoundPlan
from fedpub.strategy import RoundOutcome, usable_rows
from fedpub.types import Params, StepState, Updates
from fedpub.simulations.run.experiment import Experiment
from fedpub.simulations.run.run_dir import RunDirectory
from fedpub.simulations.run.session import RunResult, RunSession

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""What torchrun sets in each worker's environment (all of them: a worker of torchrun)."""


class WorkerLost(RuntimeError):
    """A collective of the run failed: another rank stopped (an error, a kill, its machine lost)."""


def _said(lost: WorkerLost) -> WorkerLost:
    """``lost``, written on stderr first."""
    os.write(2, f"error: {lost}\n".encode())
    return lost


class RanksDiverged(RuntimeError):
    """The ranks' models differ: their arithmetic gave different results (the run cannot go on as one run)."""


@dataclass(frozen=True)
class Launch:
    """This process's place among torchrun's workers."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None = None
    """The ranks on this machine (torchrun's ``LOCAL_WORLD_SIZE``; None: not said)."""

    def trust_statement(self) -> str | None:
        """What a run whose ranks span several machines must say at its start: who it trusts (None on one
        machine)."""
        if self.local_world_size is None or self.local_world_size >= self.world_size:
            return None
        return (f"the {self.world_size} ranks span several machines: the privacy seed, each round's model and the "
                "clipped sums cross their network unencrypted (gloo and NCCL do not encrypt), so every rank's machine "
                "and the network between them are inside the server's trust boundary")


def launched(environ: Mapping[str, str] = os.environ) -> Launch | None:
    """This process's place when torchrun started it (its variables, :data:`TORCHRUN_VARIABLES`, all set), else
    None. Some but not all of them set is refused, naming the missing ones."""
    present = [name for name in TORCHRUN_VARIABLES if name in environ]
    if not present:
        return None
    missing = [name for name in TORCHRUN_VARIABLES if name not in environ]
    if missing:
        raise ValueError(f"the environment sets {', '.join(present)} but not {', '.join(missing)}: start many "
                         "workers with torchrun (it sets them all), or unset them to run in one process")
    restarts = environ.get("TORCHELASTIC_MAX_RESTARTS", "0")
    if restarts != "0":
        # a restarted rank cannot rejoin the others' process group mid-run (gloo failed with "connectFullMesh")
        raise ValueError(f"torchrun --max-restarts {restarts}: fedpub's ranks cannot be restarted within a run; start "
                         "torchrun with --max-restarts 0 and run the same command again after a failure: it resumes "
                         "from the last checkpoint")
    local = environ.get("LOCAL_WORLD_SIZE")
    return Launch(int(environ["RANK"]), int(environ["WORLD_SIZE"]), int(environ["LOCAL_RANK"]),
                  int(local) if local is not None and local.isdigit() else None)


def rank_device(launch: Launch, device: torch.device, configured: str) -> torch.device:
    """The device rank ``launch`` trains on: the CPU, or its own GPU (``cuda:LOCAL_RANK``). A config that names one
    GPU (``cuda:1``) or another kind of device is refused, naming ``device``."""
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ValueError(f"device: {configured} cannot be shared by torchrun's ranks (gloo runs on cpu, NCCL on "
                         "cuda): use cpu or cuda")
    if configured not in ("auto", "cuda"):
        raise ValueError(f"device: {configured} names one GPU, but under torchrun each rank trains on its own "
                         "(cuda:LOCAL_RANK): use cuda or auto")
    count = torch.cuda.device_count()
    if launch.local_rank >= count:
        raise ValueError(f"torchrun started {launch.local_rank + 1} or more ranks on this machine, but it has "
                         f"{count} GPU(s): one GPU a rank (--nproc-per-node {count} at most)")
    return torch.device("cuda", launch.local_rank)


def split_by_work(work: Sequence[int], ranks: int) -> list[list[int]]:
    """The indices of ``work`` (each user's expected work: its example count) in ``ranks`` shares: largest first,
    each to the rank with the least work so far (the lowest rank on a tie); each share in its original order."""
    loads = [0] * ranks
    shares: list[list[int]] = [[] for _ in range(ranks)]
    for index in sorted(range(len(work)), key=lambda i: (-work[i], i)):
        rank = min(range(ranks), key=lambda r: (loads[r], r))
        shares[rank].append(index)
        loads[rank] += work[index]
    return [sorted(share) for share in shares]


def _moved(value: Any, device: torch.device) -> Any:
    """``value`` (tensors in dicts, lists and tuples) with every tensor on ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, Mapping):
        return {k: _moved(v, device) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_moved(v, device) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(v, device) for v in value)
    return value


def _fingerprint(params: Params) -> int:
    """The bits of the float64 sum of every parameter: equal on ranks that hold the same model."""
    total = sum((p.detach().double().sum() for p in params.values()), torch.zeros((), dtype=torch.float64))
    return int(total.reshape(1).cpu().view(torch.int64))


class Workers:
    """This rank's membership of the run's process group, and the collectives a round needs."""

    def __init__(self, launch: Launch, device: torch.device, *, owned: bool) -> None:
        self.launch, self.device, self._owned = launch, device, owned
        self.rank, self.world_size = launch.rank, launch.world_size

    @classmethod
    def open(cls, launch: Launch, experiment: Experiment) -> tuple[Workers, Experiment]:
        """Join the process group (gloo on CPU, NCCL on CUDA; one the process already joined is used as it is, and
        left open) and return ``experiment`` on this rank's device."""
        device = rank_device(launch, experiment.device, experiment.config.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        owned = not dist.is_initialized()
        if owned:
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return cls(launch, device, owned=owned), replace(experiment, device=device)

    def close(self) -> None:
        """Leave the process group, when :meth:`open` joined it."""
        if self._owned and dist.is_initialized():
            dist.destroy_process_group()

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    @contextmanager
    def _collective(self, what: str) -> Iterator[None]:
        """A collective; its failure is a :class:`WorkerLost`, said on stderr at once (torchrun's SIGTERM, which
        follows a rank's death, may end this rank before its error reaches the command line)."""
        try:
            yield
        except (RuntimeError, dist.DistError) as error:
            raise _said(WorkerLost(
                f"rank {self.rank} of {self.world_size}: {what} failed, so another rank stopped (its own error line, "
                f"or torchrun's failure report, names it); the run directory holds the rounds up to its last "
                f"checkpoint: run the same command again to resume ({error})"
            )) from error

    def broadcast(self, value: Any, what: str) -> Any:
        """Rank 0's ``value`` (tensors on the CPU), on every rank."""
        box = [value if self.is_root else None]
        with self._collective(what):
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather(self, value: Any, what: str) -> list[Any]:
        """Every rank's ``value`` (tensors on the CPU), by rank."""
        gathered: list[Any] = [None] * self.world_size
        with self._collective(what):
            dist.all_gather_object(gathered, value)
        return gathered

    def agree_to_stop(self, asked: bool, params: Params, round_index: int) -> bool:
        """Whether any rank was asked to stop before round ``round_index``; :class:`RanksDiverged` when the ranks'
        models differ."""
        mine = torch.tensor([int(asked), _fingerprint(params)], dtype=torch.int64, device=self.device)
        everyone = [torch.empty_like(mine) for _ in range(self.world_size)]
        with self._collective(f"the start of round {round_index}"):
            dist.all_gather(everyone, mine)
        prints = [int(t[1]) for t in everyone]
        if len(set(prints)) > 1:
            differing = [r for r, p in enumerate(prints) if p != prints[0]]
            raise RanksDiverged(
                f"before round {round_index} the models of ranks {differing} differ from rank 0's: their arithmetic "
                "gave different results (mixed GPU models or libraries); run the ranks on identical machines"
            )
        return any(int(t[0]) for t in everyone)

    def all_reduce_sum(
        self, total: Updates, users: int, tallies: Mapping[str, float], round_index: int
    ) -> tuple[Updates, int, dict[str, float]]:
        """The sum over the ranks of each rank's per-user sum ``total``, its ``users`` and its summed ``tallies``:
        one all-reduce per dtype of the model's tensors, one of the counts (float64: exact below 2**53). The reduction
        runs on this rank's device (NCCL reduces CUDA tensors only; the round may hold its sum on the CPU) and each
        summed tensor is returned on the device its ``total`` was on."""
        names = sorted(tallies)
        counts = torch.tensor([float(users), *(tallies[n] for n in names)], dtype=torch.float64, device=self.device)
        summed: dict[str, torch.Tensor] = {}
        with self._collective(f"the all-reduce of round {round_index}'s sum"):
            for dtype in dict.fromkeys(t.dtype for t in total.values()):
                keys = [k for k, t in total.items() if t.dtype == dtype]
                flat = torch.cat([total[k].reshape(-1) for k in keys]).to(self.device)
                dist.all_reduce(flat)
                for key, part in zip(keys, flat.split([total[k].numel() for k in keys]), strict=True):
                    summed[key] = part.view(total[key].shape).to(total[key].device)
            dist.all_reduce(counts)
        values = counts.tolist()
        return {k: summed[k] for k in total}, round(values[0]), dict(zip(names, values[1:], strict=True))

    def share(self, ids: Sequence[str], data: FederatedDataset) -> tuple[str, ...]:
        """This rank's users among ``ids`` (:func:`split_by_work` by their example counts), in ``ids``' order."""
        shares = split_by_work([data.num_examples(cid) for cid in ids], self.world_size)
        return tuple(ids[i] for i in shares[self.rank])

    def session(self, experiment: Experiment, run_dir: RunDirectory, *, fresh: bool) -> RootSession | FollowerSession:
        """Rank 0 opens the run (:class:`RootSession`) and broadcasts where it starts; the other ranks follow it
        (:class:`FollowerSession`). When rank 0 cannot open it, every rank stops with rank 0's error."""
        if self.is_root:
            try:
                root = RootSession(experiment, run_dir, fresh=fresh, workers=self)
            except BaseException as error:
                self.broadcast(("refused", f"{type(error).__name__}: {error}"), "opening the run")
                raise
            self.broadcast(("start", root.start()), "opening the run")
            return root
        kind, value = self.broadcast(None, "opening the run")
        if kind == "refused":
            raise _said(WorkerLost(f"rank {self.rank}: rank 0 could not open the run: {value}"))
        return FollowerSession(experiment, run_dir, value, self)

    def result(self, result: RunResult | None, run_dir: RunDirectory) -> RunResult:
        """Rank 0's result of the run, on every rank."""
        sent = None if result is None else replace(result, params=_moved(result.params, torch.device("cpu")))
        received: RunResult = self.broadcast(sent, "the end of the run")
        return replace(received, run_dir=run_dir, params=_moved(received.params, self.device))

    def train_round(
        self, session: RootSession | FollowerSession, trainer: CohortTrainer, plan: RoundPlan, *,
        read_ahead: Callable[[Callable[[Sequence[str], FederatedDataset], Sequence[str]]], None] | None,
        log: Callable[[str], None] | None,
    ) -> tuple[RoundOutcome | None, list[Mapping[str, float]], int]:
        """Round ``plan`` across the ranks: this rank's share trained, the public updates gathered, the per-user
        part on this rank's rows, the sum all-reduced, the round finished from it (None: refused by the budget).
        Returns the outcome, every rank's users' training metrics and their examples. ``read_ahead(share)`` starts
        reading the next round's users of this rank (``share``: a rank's users among a round's) while it trains."""
        experiment, params, driver = session.experiment, session.params, session.driver
        mine = replace(plan, private_cohort=self.share(plan.private_cohort, experiment.train),
                       public_cohort=self.share(plan.public_cohort, experiment.public_data))
        private, public = train_cohorts(
            trainer, experiment.config.seed, mine, experiment.train, experiment.public_data, params,
            read=None if read_ahead is None else lambda: read_ahead(self.share), log=log,
        )
        cpu = torch.device("cpu")
        gathered = self.all_gather(
            ({cid: _moved(dict(r.update), cpu) for cid, r in public.items()},
             [dict(r.metrics) for r in private.values()], sum(r.num_examples for r in private.values())),
            f"gathering round {plan.round}'s public updates",
        )
        public_replies = {cid: u for replies, _, _ in gathered for cid, u in replies.items()}  # on the CPU, as trained
        metrics = [m for _, rank_metrics, _ in gathered for m in rank_metrics]
        examples = sum(n for _, _, n in gathered)
        prepared = driver.prepare(plan, params, session.state, public_replies)
        if prepared is None:
            return None, metrics, examples
        rows = usable_rows([private[c].update for c in mine.private_cohort if c in private], params)
        mapped = experiment.strategy.per_user(rows, prepared.prep)
        total, users, tallies = self.all_reduce_sum(mapped.updates.sum(), len(rows), mapped.tally_sums(), plan.round)
        return driver.finish_from_sum(prepared, total, users, tallies), metrics, examples


class RootSession(RunSession):
    """Rank 0's session: the run directory's, as in one process, whose start and result every rank receives."""

    def __init__(self, experiment: Experiment, run_dir: RunDirectory, *, fresh: bool, workers: Workers) -> None:
        super().__init__(experiment, run_dir, fresh=fresh)
        self._workers = workers

    def start(self) -> dict[str, Any]:
        """Where the run starts (tensors on the CPU), for the other ranks: rounds done, model, strategy state,
        accountant, privacy seed (a secret one only in memory), path choices, whether it is finished."""
        cpu = torch.device("cpu")
        return {
            "rounds_done": self.rounds_done, "params": _moved(self.params, cpu), "state": _moved(self.state, cpu),
            "accountant": self.accountant.to_dict(), "randomness": self.experiment.randomness.to_dict(),
            "paths": None if self._fresh else self.run_dir.load_paths(), "finished": self.finished,
            "resumed_from": self.resumed_from,
        }

    def finished_result(self) -> RunResult:
        return self._workers.result(super().finished_result(), self.run_dir)

    def finish(self) -> RunResult:
        return self._workers.result(super().finish(), self.run_dir)


class FollowerSession:
    """A rank other than 0: the run as rank 0 started it (:meth:`RootSession.start`), its rounds finished as on
    rank 0; it writes, evaluates and checkpoints nothing."""

    def __init__(self, experiment: Experiment, run_dir: RunDirectory, start: Mapping[str, Any],
                 workers: Workers) -> None:
        self.experiment = experiment.with_randomness(PrivacyRandomness.from_dict(start["randomness"]))
        self.run_dir, self._workers, self._paths = run_dir, workers, start["paths"]
        self.model = self.experiment.new_model()
        self.params: Params = _moved(start["params"], workers.device)
        self.state: StepState = _moved(start["state"], workers.device)
        self.rounds_done: int = start["rounds_done"]
        self.finished: bool = start["finished"]
        self.resumed_from: int | None = start["resumed_from"]
        self.driver: RoundDriver = self.experiment.round_driver(UserLevelAccountant.from_dict(start["accountant"]))
        for said_by_rank_0 in (NoisyBeyondSignal, PublicUpdateRefused):  # the same rounds warn the same on rank 0
            warnings.filterwarnings("ignore", category=said_by_rank_0)

    def cohort_trainer(self, log: Callable[[str], None] | None = None) -> CohortTrainer:
        """The cohort trainer, with rank 0's path choices when the run resumes."""
        return self.experiment.cohort_trainer(self.model, stored=self._paths, log=log)

    def record(self, round_index: int, outcome: RoundOutcome, client_metrics: Sequence[Mapping[str, float]],
               examples: int) -> dict[str, Any]:
        """Adopt the round's outcome; stop as rank 0 does when the cohorts keep failing."""
        self.params, self.state, self.rounds_done = outcome.params, outcome.state, round_index + 1
        if self.driver.keeps_failing:
            raise self.driver.cohorts_keep_failing(round_index, "rank 0 checkpointed the run")
        return {"round": round_index}

    def start_round(self) -> None:
        """Nothing: the round's wall time is rank 0's."""

    def checkpoint_if_started(self) -> None:
        """Nothing: rank 0 checkpoints."""

    def drop_records_past_checkpoint(self) -> None:
        """Nothing: rank 0 writes the records."""

    def close(self) -> None:
        """Nothing: rank 0 holds the directory."""

    def finished_result(self) -> RunResult:
        return self._workers.result(None, self.run_dir)

    def finish(self) -> RunResult:
        return self._workers.result(None, self.run_dir)
