"""Benchmark: client updates per second and seconds per round, side by side on the same work.

For each task (EMNIST small CNN, EMNIST 2-layer MLP, StackOverflow tag logistic regression on the offline
look-alike files) and cohort size, the same DP-FedAvg rounds (Poisson cohorts of m users expected of N, one
local epoch of batch-16 SGD, clip 0.5, z = 1) are run by:

- ``floor``: a bare PyTorch loop doing exactly the local SGD steps of those rounds (same users, same data
  already in memory, same minibatch order), nothing else: the compute floor on this machine (run twice, before
  fedpub and after, each round's faster time kept; fedpub's paths and pfl-research are likewise the faster of two
  runs);
- ``dp-floor`` (and ``dp-floor-cut``): the same bare loop plus a bare DP aggregation written plainly in torch
  (each user's update clipped and added to the sum, one Gaussian draw of the model's size, one model write): what
  any implementation of the mechanism must do, the floor ``x_dp_floor`` divides by (issue 35's target: 1.10×);
- ``floor-cut`` (StackOverflow's one-``Linear`` model): the same bare loop, each user's steps on the weight
  columns of the words its examples use (the other columns' gradients are zero): the same steps with the least
  arithmetic, and the floor ``x_floor`` divides by when it is the faster;
- ``fedpub`` / ``fedpub-loop``: fedpub's in-process engine, whole rounds (reading the users' data, training,
  clipping, noise, server step, accounting), with ``client.path: auto`` (the default: each group size trained
  the way the run's first groups of that size ran faster; its choices, from the run's ``paths.json``, are in
  the ``fedpub_paths`` column) and ``loop`` (user by user);
- ``flower``: the same experiment in Flower's simulation (Ray), one virtual SuperNode per user;
- ``pfl-research`` (with ``--pfl-python``): pfl 0.6's PyTorch simulation on the same users, model and local
  work (:mod:`fedpub.simulations.benchmarks.pfl_research`; pfl lives in its own venv).

Users hold 20-80 examples (EMNIST) or 5-30 (StackOverflow) (``--examples default``); ``--examples 5,30`` gives
every task small users, the setting where per-client costs (Flower's per-client messages, a Python loop per user)
dominate. ``--examples`` may be given more than once: the grid runs every setting. Below the per-path table,
the summary gives per cell fedpub's default ÷ the faster floor and ÷ the faster DP floor, pfl-research's
updates/s ÷ fedpub's, and whether the cell meets issue 23's target (within 1.25× of the floor, ahead of
pfl-research) and issue 35's (within 1.10× of the DP floor).

The benchmark turns on the allocator tuning of :mod:`fedpub.simulations.run.memory` (glibc keeps freed memory; process-wide,
so the floor and fedpub get the same allocator; fedpub's engine applies it only when asked) before the first
measurement, and its report says whether it took effect. Steady figures leave out the first round (start-up,
Ray actors), the last (it evaluates) and those in which fedpub's default timed groups both ways to choose its paths
(a start-up cost, as cuDNN's benchmark mode's first calls; the diagnostics' ``groups_timed``): the same rounds
for every path, so each compares the same cohorts; ``steady_rounds`` says how many are left. fedpub's in-process
runs read every user into memory before the first round (``data.preload``), as the floor and pfl-research hold
them. Writes ``throughput.md`` and ``throughput.csv`` under ``--out``.

    python -m fedpub.simulations.benchmarks.throughput [--tasks emnist_cnn,emnist_mlp,so_logreg] [--cohorts 10,50,200]
        [--rounds 4] [--flower-max-gb 2] [--pfl-python .venv-pfl/bin/python] [--examples default --examples 5,30]
        [--device cpu] [--workers 1,2] [--out runs/benchmarks/throughput]

With ``--workers 1,2`` fedpub's default round is also run on each worker count in processes of its own (one
plain process; W torchrun ranks on 127.0.0.1 sharing each round, gloo on CPUs, one GPU a rank with ``--device
cuda``; :mod:`fedpub.simulations.benchmarks.workers`), and a third table gives per cell and worker count rank 0's
median steady round (``round_s``), ``speedup`` t1 / tW, ``scaling_efficiency`` t1 / (W · tW), each rank's peak RSS
and the load average. Like every benchmark it runs with the fedpub command's OpenMP wait policy (the header says
which, :mod:`fedpub.simulations.benchmarks`).

Each row also gives the FLOP-bound floor (:mod:`fedpub.simulations.benchmarks.flop_floor`): the round's
matrix-product and convolution FLOPs at the device's measured float32 matmul rate. With ``--device cuda`` the
floor and fedpub train on the GPU (issue 7's GPU table: add ``--cohorts 100`` for its 100-user EMNIST CNN round,
whose vectorised path should be within 3× of this floor and 10× the per-client loop).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from fedpub.clients.input_columns import input_layer
from fedpub.clients.local_training import LocalTrainingConfig, plan_local_training
from fedpub.clients.path_choice import GroupKey
from fedpub.config import parse_config
from fedpub.data.base import ClientData
from fedpub.seeding import torch_generator
from fedpub.simulations.benchmarks import THREADS
from fedpub.simulations.benchmarks.flop_floor import matmul_flops_per_second, synchronize
from fedpub.simulations.benchmarks.pfl_research import run_pfl
from fedpub.simulations.benchmarks.workers import (
    launch, load_average, parse_workers, peak_rss_by_rank, rss_note, scaling_efficiency, speedup,
)
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import Experiment, build_experiment
from fedpub.simulations.flower.simulation import run_flower_simulation
from fedpub.simulations.run.memory import keep_freed_memory
from fedpub.simulations.run.run_dir import RunDirectory
from fedpub.simulations.tools.threads import thread_line

TASKS: dict[str, dict[str, Any]] = {
    "emnist_cnn": {"model": {"name": "emnist_small_cnn"}, "data": {"source": "synthetic_emnist"}},
    "emnist_mlp": {"model": {"name": "emnist_mlp"}, "data": {"source": "synthetic_emnist"}},
    "so_logreg": {"model": {"name": "so_tag_logreg"}, "data": {"source": "synthetic_stackoverflow"}, "task": "so_tag"},
}


EXAMPLES = {"emnist_cnn": (20, 80), "emnist_mlp": (20, 80), "so_logreg": (5, 30)}
"""Examples per user, (fewest, most), of each task's synthetic users unless ``--examples`` says otherwise."""


def _config(
    task: str,
    cohort: int,
    rounds: int,
    root: Path,
    *,
    path: str = "auto",
    examples: tuple[int, int] | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    population = max(200, 2 * cohort)
    spec = TASKS[task]
    fewest, most = examples or EXAMPLES[task]
    return {
        "name": f"{task}_{cohort}",
        "seed": 0,
        "rounds": rounds,
        "eval_every": rounds,
        "checkpoint_every": rounds,
        "output_dir": str(root / "runs"),
        "device": device,
        "task": spec.get("task", "classification"),
        "model": spec["model"],
        "data": {
            **spec["data"],
            "path": str(root / "data" / f"{task}_{population}_{fewest}_{most}"),
            "synthetic": {"num_writers": population, "min_examples": fewest, "max_examples": most, "seed": 0},
            "synthetic_stackoverflow": {
                "num_clients": population, "test_clients": 20, "min_examples": fewest, "max_examples": most, "seed": 0
            },
            "eval_clients": 20,
        },
        "client": {"epochs": 1, "batch_size": 16, "lr": 0.05, "path": path},
        "strategy": {
            "clip_norm": 0.5,
            "noise_multiplier": 1.0,
            "sampling": {"kind": "poisson", "clients_per_round": cohort},
            "server_optimizer": {"name": "sgd", "lr": 1.0},
        },
        "privacy": {"accountant": "pld"},
        # on a GPU each Ray actor needs a share of it to see it at all (Ray hides the GPU from actors with none)
        "flower": {"client_num_cpus": 1, "ray_num_cpus": 2, "client_num_gpus": 0.25 if device == "cuda" else 0.0},
    }


Rounds = list[tuple[float, int]]
"""(seconds, user updates) of each round."""


def _floor(
    experiment: Experiment, rounds: int, *, cut: bool = False, dp: bool = False, flops: list[int] | None = None
) -> Rounds:
    """Each round of a bare loop doing exactly the engine's local SGD steps (data preloaded on the experiment's
    device). With ``cut`` (a model that is one ``Linear``): each user's steps on the weight columns its examples
    use, the least arithmetic those steps need. With ``dp``, the bare DP aggregation as well (:class:`_BareDP`:
    each update clipped and summed, one Gaussian draw of the model's size, one model write). With ``flops``, each
    round runs under a FLOP counter and its count is appended (the counter slows the round: a counting pass is
    not a timing)."""
    cfg, config, device = experiment.config, experiment.local_training, experiment.device
    model = experiment.new_model()
    params = [p.detach().clone() for p in model.parameters()]
    aggregate = _BareDP(experiment, params) if dp else None
    cohorts = [experiment.strategy.sample_cohort(experiment.private_ids, t) for t in range(rounds)]
    data = {}
    for cid in {cid for cohort in cohorts for cid in cohort}:
        user = experiment.train.client_data(cid)
        data[cid] = ClientData(user.x.to(device), user.y.to(device))
    times = []
    for t, cohort in enumerate(cohorts):
        generators = [torch_generator(cfg.seed, t, "client", cid) for cid in cohort]
        counter = FlopCounterMode(display=False) if flops is not None else contextlib.nullcontext()
        synchronize(device)
        started = time.perf_counter()
        with counter:
            for cid, generator in zip(cohort, generators):
                plan = plan_local_training(data[cid], config, generator)
                if cut:
                    columns = plan.x.abs().sum(dim=0).nonzero().squeeze(1)
                    weight = params[0].t().index_select(0, columns).requires_grad_()
                    bias = params[1].clone().requires_grad_()
                    x, trained = plan.x[:, columns], [weight, bias]
                    forward = lambda inputs: torch.nn.functional.linear(inputs, weight.t(), bias)  # noqa: E731
                else:
                    with torch.no_grad():
                        for p, start in zip(model.parameters(), params):
                            p.copy_(start)
                    x, trained, forward = plan.x, list(model.parameters()), model
                optimizer = torch.optim.SGD(trained, lr=config.lr)
                for batch in plan.batches:
                    batch = batch.to(device)
                    optimizer.zero_grad()
                    experiment.task.loss(forward(x[batch]), plan.y[batch]).backward()
                    optimizer.step()
                if aggregate is not None:
                    aggregate.add(trained, columns if cut else None)
            if aggregate is not None:
                aggregate.release()
            synchronize(device)
        times.append((time.perf_counter() - started, len(cohort)))
        if flops is not None:
            flops.append(counter.get_total_flops())
    return times


class _BareDP:
    """DP-FedAvg's server work written plainly in torch, the least any implementation of the mechanism does: each
    user's update (trained minus start) clipped to C and added to the sum (a cut user's into its columns), then per
    round one Gaussian draw of the model's size (std z·C) and one write of the model (start += lr · (sum + noise)
    / expected cohort). ``params`` are the round's start, the loop's model, written in place."""

    def __init__(self, experiment: Experiment, params: list[torch.Tensor]) -> None:
        strategy = experiment.config.strategy
        self.params, self.clip = params, strategy.clip_norm
        self.std = experiment.noise_multiplier * strategy.clip_norm
        self.scale = strategy.server_optimizer.lr / strategy.sampling.clients_per_round
        self.sums = [torch.zeros_like(p) for p in params]
        self.generator = torch.Generator(params[0].device).manual_seed(experiment.config.seed)

    def add(self, trained: list[torch.Tensor], columns: torch.Tensor | None) -> None:
        """Clip one user's update and add it to the sum; ``columns``: a cut user's (its weight is columns × out)."""
        with torch.no_grad():
            if columns is None:
                updates = [t - p for t, p in zip(trained, self.params)]
            else:
                updates = [trained[0] - self.params[0].t().index_select(0, columns), trained[1] - self.params[1]]
            norm = torch.sqrt(sum(u.square().sum() for u in updates))
            factor = (self.clip / (norm + 1e-12)).clamp(max=1.0)
            if columns is None:
                for total, update in zip(self.sums, updates):
                    total.add_(update * factor)
            else:
                self.sums[0].index_add_(1, columns, (updates[0] * factor).t())
                self.sums[1].add_(updates[1] * factor)

    def release(self) -> None:
        """Noise the sum with one draw of the model's size, write the model once, zero the sum."""
        with torch.no_grad():
            sizes = [p.numel() for p in self.params]
            noise = torch.empty(sum(sizes), device=self.params[0].device).normal_(generator=self.generator)
            for p, total, draw in zip(self.params, self.sums, noise.split(sizes)):
                p.add_(total.add_(draw.view_as(p), alpha=self.std), alpha=self.scale)
                total.zero_()


def _engine(cfg_dict: dict[str, Any], run: Callable[[Any], None]) -> tuple[Rounds, list[int], dict[str, Any]]:
    """The run's rounds, the rounds in which its cohort trainer timed groups both ways (their seconds hold both
    paths' work), and its path choices (``paths.json``; none for a forced path)."""
    cfg = parse_config(cfg_dict)
    run(cfg)
    run_dir = RunDirectory(cfg.output_dir / cfg.name)
    records = run_dir.read_diagnostics()
    timing = [t for t, r in enumerate(records) if r.get("groups_timed")]
    return [(r["wall_time"], int(r["cohort_sampled"])) for r in records], timing, run_dir.load_paths() or {}


def _paths_note(choices: dict[str, Any]) -> str:
    """The path choices in a few words, by group size: ``2-3: loop; 8-15: vectorised``."""
    kept = sorted((GroupKey(entry["model"], entry["smallest_group"]), entry["path"]) for entry in choices.values())
    return "; ".join(f"{key.sizes}: {path}" for key, path in kept) or "-"


def _export_for_pfl(experiment: Experiment, cohort: int, rounds: int, path: Path) -> None:
    """The population, initial model and local work, in the file format of the pfl-research worker."""
    model = experiment.new_model()
    users = [experiment.train.client_data(cid) for cid in experiment.private_ids]
    config: LocalTrainingConfig = experiment.local_training
    torch.save(
        {
            "model": experiment.config.model.name,
            "num_classes": experiment.train.num_classes,
            "task": experiment.config.task,
            "users": [{"x": u.x, "y": u.y} for u in users],
            "initial_params": {k: v.detach() for k, v in model.state_dict().items()},
            "local": {"epochs": config.epochs, "batch_size": config.batch_size, "lr": config.lr},
            "cohort": cohort,
            "rounds": rounds,
            "clip_norm": experiment.config.strategy.clip_norm,
            "noise_multiplier": experiment.noise_multiplier,
            "seed": experiment.config.seed,
        },
        path,
    )


_FLOORS = (
    ("floor", False, False), ("floor-cut", True, False), ("dp-floor", False, True), ("dp-floor-cut", True, True),
)
"""The bare loops: (label, cut to the used columns, with the bare DP aggregation); the cut ones only for a model
that is one ``Linear``."""

BARE = ("floor", "floor-cut")
"""The training-only floors: ``x_floor`` divides by the faster."""

DP = ("dp-floor", "dp-floor-cut")
"""The floors with the bare DP aggregation: ``x_dp_floor`` divides by the faster."""


def measure(
    task: str,
    cohort: int,
    rounds: int,
    root: Path,
    *,
    flower_max_gb: float,
    pfl_python: str | None,
    examples: tuple[int, int] | None = None,
    device: str = "cpu",
) -> tuple[dict[str, Rounds], list[int], dict[str, Any], dict[str, list[int]]]:
    """Every path's rounds on one task and cohort size (pfl-research: fixed cohorts of ``cohort``; each floor
    measured twice, before fedpub and after on an experiment built anew, each round's faster time kept: the same
    loop on a 5M-parameter model built anew ran 0.23 s a round in one process and 0.33 s in the next, its
    strided column reads at the mercy of where the weight's memory landed; fedpub's paths and pfl-research are
    likewise each the faster of two runs, round by round, so that no path is judged on one run against another's
    best of two), the FLOPs
    of each round's local steps, counted on the bare loop with the fewest (floor-cut where there is one), and
    fedpub's path choices (its default run's ``paths.json``) and the rounds in which each fedpub run timed its
    paths. Flower is skipped when a round's replies would exceed ``flower_max_gb``: its server holds them all in memory (with
    so_logreg's 5M parameters at 200 users the process passed this machine's 24 GB and was killed)."""
    base = _config(task, cohort, rounds, root, examples=examples, device=device)
    experiment = build_experiment(parse_config(base))  # also generates the data, outside every timing
    model = experiment.new_model()
    replies_gb = cohort * sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30
    flower = replies_gb <= flower_max_gb
    if not flower:
        print(f"{task} cohort {cohort}: Flower skipped, a round's replies would hold {replies_gb:.1f} GB", flush=True)
    population = len(experiment.private_ids)
    cut = input_layer(model) is not None and len(model) == 1  # the bare cut loop runs F.linear alone
    floors = {label: (cut_floor, dp) for label, cut_floor, dp in _FLOORS if cut or not cut_floor}
    times = {label: _floor(experiment, rounds, cut=cut_floor, dp=dp) for label, (cut_floor, dp) in floors.items()}
    flops: list[int] = []
    _floor(experiment, rounds, cut=cut, flops=flops)
    choices: dict[str, Any] = {}
    timing: dict[str, list[int]] = {}

    def fedpub_runs() -> None:
        """fedpub's default and loop paths, each round's faster time kept over the runs so far (as the floors')."""
        for label, path in (("fedpub", "auto"), ("fedpub-loop", "loop")):
            cfg_dict = _config(task, cohort, rounds, root, path=path, examples=examples, device=device)
            # the cell's name (its cohorts and noise derive from it: the floor's rounds), in a folder of the path's own
            cfg_dict["output_dir"] = str(root / "runs" / label)
            cfg_dict["data"]["preload"] = True  # every user in memory before round 0, as the floor and pfl hold them
            run, timed, made = _engine(cfg_dict, lambda cfg: run_in_process(
                build_experiment(cfg), RunDirectory(cfg.output_dir / cfg.name), fresh=True,
                log=lambda line: print(f"{task} cohort {cohort} {label}: {line}", flush=True),
            ))
            times[label] = _faster(times.get(label), run)
            timing[label] = sorted({*timing.get(label, ()), *timed})  # either run's timing rounds are not steady
            choices.update(made)

    fedpub_runs()
    if flower:
        cfg_dict = {**base, "output_dir": str(root / "runs" / "flower")}
        times["flower"] = _engine(cfg_dict, lambda cfg: run_flower_simulation(cfg, population, fresh=True))[0]
    anew = build_experiment(parse_config(base))
    for label, (cut_floor, dp) in floors.items():  # again, on a model built anew: each round's faster time is kept
        times[label] = _faster(times[label], _floor(anew, rounds, cut=cut_floor, dp=dp))
    fedpub_runs()  # again too: every compared path is the faster of two runs, round by round
    if pfl_python:
        task_file = root / f"{task}_{cohort}_pfl.pt"
        _export_for_pfl(experiment, cohort, rounds, task_file)
        for _ in range(2):
            run = [(seconds, cohort) for seconds in run_pfl(pfl_python, task_file)["round_s"]]
            times["pfl-research"] = _faster(times.get("pfl-research"), run)
    return times, flops, choices, timing


def _faster(earlier: Rounds | None, run: Rounds) -> Rounds:
    """Each round's faster time of ``earlier`` (None: no run yet) and ``run`` (the same rounds and cohorts)."""
    return run if earlier is None else [min(a, b) for a, b in zip(earlier, run, strict=True)]


@dataclass(frozen=True)
class WorkerRun:
    """fedpub's default path on one worker count: its rounds, the rounds in which rank 0 timed its paths, each
    rank's peak RSS (MiB), each rank's torch threads, and the load average when it ended."""

    rounds: Rounds
    timing: list[int]
    peak_rss_mib: list[float]
    threads: int
    load: float


WORKER_TIMEOUT_S = 1800
"""The longest one worker count's run of one cell may take before the benchmark stops with its output."""


def measure_workers(
    task: str, cohort: int, rounds: int, root: Path, counts: list[int], *,
    examples: tuple[int, int] | None = None, device: str = "cpu",
) -> dict[int, WorkerRun]:
    """fedpub's default path (``client.path: auto``, every user preloaded) on each worker count of ``counts``, each
    in fresh processes (:func:`fedpub.simulations.benchmarks.workers.launch`: one plain process, or torchrun's
    ranks sharing each round): the same cell, cohorts and noise as :func:`measure`'s (the run has the cell's name).
    The cell's data is written first, here, so that the ranks only read it."""
    build_experiment(parse_config(_config(task, cohort, rounds, root, examples=examples, device=device)))
    runs = {}
    for workers in counts:
        cfg_dict = _config(task, cohort, rounds, root, examples=examples, device=device)
        cfg_dict["output_dir"] = str(root / "runs" / f"fedpub-workers-{workers}")
        cfg_dict["data"]["preload"] = True
        config_file, result_file = root / f"workers_{workers}.json", root / f"workers_{workers}_result.json"
        config_file.write_text(json.dumps(cfg_dict))
        program = ["-m", "fedpub.simulations.benchmarks.throughput", "--rank-run", str(config_file), str(result_file)]
        times, timing, _ = _engine(cfg_dict, lambda cfg: launch(workers, program, timeout=WORKER_TIMEOUT_S))
        result = json.loads(result_file.read_text())
        runs[workers] = WorkerRun(times, timing, result["peak_rss_mib"], result["threads"], load_average())
    return runs


def _rank_run(config_file: Path, result_file: Path) -> None:
    """One process of :func:`measure_workers`: the run of ``config_file`` (a config as JSON), in process or as
    this torchrun rank's share (its device the rank's: ``cuda:LOCAL_RANK`` on a GPU machine); rank 0 writes every
    rank's peak RSS and its torch threads to ``result_file``."""
    from fedpub.simulations.run.distributed import Workers, launched

    keep_freed_memory()  # the allocator of the benchmark's own process
    cfg = parse_config(json.loads(config_file.read_text()))
    experiment = build_experiment(cfg)
    where = launched()
    workers = None
    if where is not None:
        workers, experiment = Workers.open(where, experiment)
    try:
        run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name), fresh=True, workers=workers)
        peaks = peak_rss_by_rank()
    finally:
        if workers is not None:
            workers.close()
    if where is None or where.rank == 0:
        result_file.write_text(json.dumps({"peak_rss_mib": peaks, "threads": torch.get_num_threads()}))


def _steady(rounds: int, timing: list[int]) -> list[int]:
    """The steady rounds of ``rounds``: not the first (start-up) nor the last (it evaluates), nor those in which
    fedpub's cohort trainer timed groups both ways (``timing``: a start-up cost of the run, as cuDNN's benchmark
    mode's first calls), unless that leaves none."""
    middle = list(range(1, rounds - 1)) or list(range(rounds))
    return [t for t in middle if t not in timing] or middle


def _rows(
    task: str, cohort: int, examples: str, times: dict[str, Rounds], flops: list[int], flops_per_second: float,
    timing: list[int],
) -> list[dict[str, Any]]:
    """Mean seconds per round, updates per second, and ratios, over the same steady rounds (:func:`_steady`) of
    every path (``timing``: the rounds fedpub's default spent timing its paths). The floor and the fedpub and
    Flower paths train the same Poisson cohorts, whose steady rounds' mean ``flops`` at ``flops_per_second``
    is the FLOP-bound floor; pfl-research trains fixed cohorts of m."""
    steady_rounds = _steady(len(flops), timing)
    steady = {label: [rounds[t] for t in steady_rounds if t < len(rounds)] for label, rounds in times.items()}
    steady_flops = [flops[t] for t in steady_rounds]
    flop_floor_s = sum(steady_flops) / len(steady_flops) / flops_per_second
    seconds = {label: sum(s for s, _ in r) / len(r) for label, r in steady.items()}
    rate = {label: sum(n for _, n in r) / sum(s for s, _ in r) for label, r in steady.items()}
    floor = min(seconds[label] for label in BARE if label in seconds)
    dp_floor = min(seconds[label] for label in DP if label in seconds)
    return [
        {
            "task": task,
            "cohort": cohort,
            "examples": examples,
            "path": label,
            "steady_rounds": len(steady[label]),
            "steady_s_per_round": round(seconds[label], 4),
            "updates_per_s": round(rate[label], 1),
            "x_floor": round(seconds[label] / floor, 2),
            "x_dp_floor": round(seconds[label] / dp_floor, 2),
            "fedpub_speedup": round(rate["fedpub"] / rate[label], 2),
            "round_gflop": round(flop_floor_s * flops_per_second / 1e9, 3),
            "x_flop_floor": round(seconds[label] / flop_floor_s, 1) if flop_floor_s > 0 else float("inf"),
        }
        for label in steady
    ]


def _worker_rows(task: str, cohort: int, examples: str, runs: dict[int, WorkerRun]) -> list[dict[str, Any]]:
    """Per worker count: the median of rank 0's steady rounds (:func:`_steady`, each run's own timing rounds left
    out), the speedup t1 / tW and the scaling efficiency t1 / (W · tW), each rank's peak RSS and the load average."""
    seconds = {}
    for workers, run in runs.items():
        steady = _steady(len(run.rounds), run.timing)
        seconds[workers] = (statistics.median(run.rounds[t][0] for t in steady), len(steady))
    one = seconds[1][0]
    return [
        {
            "task": task, "cohort": cohort, "examples": examples, "workers": workers,
            "threads_per_rank": run.threads, "steady_rounds": seconds[workers][1],
            "round_s": round(seconds[workers][0], 4),
            "speedup": round(speedup(one, seconds[workers][0]), 2),
            "scaling_efficiency": round(scaling_efficiency(one, seconds[workers][0], workers), 2),
            "peak_rss_mib_by_rank": rss_note(run.peak_rss_mib), "load_avg": run.load,
        }
        for workers, run in runs.items()
    ]


TARGET_X_FLOOR = 1.25
"""Issue 23's target: fedpub's default within this factor of the faster floor (and ahead of pfl-research)."""

TARGET_X_DP_FLOOR = 1.10
"""Issue 35's target: fedpub's default within this factor of the faster DP floor (and ahead of pfl-research)."""


def _summary(rows: list[dict[str, Any]], paths: dict[tuple[str, int, str], str]) -> list[dict[str, Any]]:
    """One row per cell: fedpub's default against the faster floor and pfl-research, and whether it meets the
    target (``-`` for pfl-research when it did not run)."""
    cells: dict[tuple[str, int, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        cells.setdefault((row["task"], row["cohort"], row["examples"]), {})[row["path"]] = row
    summary = []
    for (task, cohort, examples), by_path in cells.items():
        fedpub, pfl = by_path["fedpub"], by_path.get("pfl-research")
        ahead = None if pfl is None else pfl["fedpub_speedup"] > 1.0
        summary.append({
            "task": task, "cohort": cohort, "examples": examples,
            "floor_s": min(by_path[p]["steady_s_per_round"] for p in BARE if p in by_path),
            "dp_floor_s": min(by_path[p]["steady_s_per_round"] for p in DP if p in by_path),
            "fedpub_s": fedpub["steady_s_per_round"], "fedpub_x_floor": fedpub["x_floor"],
            "fedpub_x_dp_floor": fedpub["x_dp_floor"],
            "fedpub_loop_x_floor": by_path["fedpub-loop"]["x_floor"],
            "fedpub_paths": paths.get((task, cohort, examples), "-"),
            "steady_rounds": fedpub["steady_rounds"],
            "pfl_s": "-" if pfl is None else pfl["steady_s_per_round"],
            "fedpub_vs_pfl": "-" if pfl is None else pfl["fedpub_speedup"],
            "within_1.25x": "yes" if fedpub["x_floor"] <= TARGET_X_FLOOR else "no",
            "within_1.10x_dp": "yes" if fedpub["x_dp_floor"] <= TARGET_X_DP_FLOOR else "no",
            "ahead_of_pfl": "-" if ahead is None else ("yes" if ahead else "no"),
        })
    return summary


def _table(rows: list[dict[str, Any]]) -> list[str]:
    columns = list(rows[0])
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows)]


def _write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _write(
    rows: list[dict[str, Any]], paths: dict[tuple[str, int, str], str], out: Path, header: str,
    worker_rows: list[dict[str, Any]],
) -> str:
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(rows, out / "throughput.csv")
    summary = _summary(rows, paths)
    lines = [header, "", *_table(rows)]
    lines += [
        "",
        ("x_floor: seconds per round ÷ the fastest bare loop's on the same cohorts (floor, or floor-cut: each"
        " user's steps on the input columns its examples use; pfl-research trains fixed cohorts of m);"
        " x_dp_floor: the same ÷ the faster bare loop with the bare DP aggregation (dp-floor, dp-floor-cut: each"
        " update clipped and summed, one Gaussian draw of the model's size, one model write);"
        " fedpub_speedup: fedpub's default (client.path: auto) updates/s ÷ the path's (> 1: fedpub is that many"
        " times faster); round_gflop: matrix-product and convolution GFLOP of a steady round's local steps"
        " (fewest-FLOP bare loop); x_flop_floor: seconds per round ÷ those FLOPs at the device's measured matmul"
        " rate (the FLOP-bound floor)."),
        "",
        f"## Per cell: fedpub's default against the faster floor (issue 23's target ≤ {TARGET_X_FLOOR}×), the"
        f" faster DP floor (issue 35's target ≤ {TARGET_X_DP_FLOOR}×) and pfl-research",
        "",
        *_table(summary),
        "",
        ("fedpub_paths: the path kept per group size (users with the same number of local steps) by the timed"
         " choice, from the run's paths.json; fedpub_vs_pfl: fedpub's updates/s ÷ pfl-research's."),
    ]
    if worker_rows:
        _write_csv(worker_rows, out / "throughput_workers.csv")
        lines += [
            "", "## Per cell and worker count: fedpub's default round on torchrun's ranks", "",
            *_table(worker_rows), "",
            ("Each worker count in processes of its own (1: the in-process engine; W > 1: W gloo ranks on 127.0.0.1"
             " sharing each round); round_s: the median of rank 0's steady rounds; speedup: t1 / tW;"
             " scaling_efficiency: t1 / (W · tW); peak_rss_mib_by_rank: each rank's peak resident memory;"
             " load_avg: the machine's 1-minute load average when the run ended (other processes' work)."),
        ]
    text = "\n".join(lines) + "\n"
    (out / "throughput.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="emnist_cnn,emnist_mlp,so_logreg")
    parser.add_argument("--cohorts", default="10,50,200")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--flower-max-gb", type=float, default=2.0,
                        help="skip Flower where a round's replies exceed this many GB (0: never run Flower)")
    parser.add_argument("--pfl-python", default=None, help="python of a venv with pfl 0.6 (see pfl_research.py)")
    parser.add_argument("--examples", action="append", metavar="FEWEST,MOST|default",
                        help="examples per synthetic user, e.g. 5,30 for small clients; default: EMNIST 20,80, "
                             "StackOverflow 5,30; give it more than once to run the grid over several")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the floor and fedpub train (cuda: the first GPU; Flower's clients get 0.25 of it)")
    parser.add_argument("--workers", default="1", metavar="1,2",
                        help="worker counts of fedpub's default round (torchrun's gloo ranks on 127.0.0.1, or one GPU "
                             "a rank with --device cuda), each in processes of its own, threads = cores / W unless "
                             "OMP_NUM_THREADS is set; more than 1 adds the scaling table")
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/throughput"))
    parser.add_argument("--rank-run", nargs=2, type=Path, metavar=("CONFIG", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_run:
        _rank_run(*args.rank_run)
        # a rank's results are written and it has left the process group: it ends here, before the interpreter's
        # finalization, in which a native thread still inside torch or gloo can abort the process ("terminate
        # called without an active exception", seen once in three CI runs after the cell had passed)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    try:
        counts = parse_workers(args.workers)
    except ValueError as error:
        parser.error(str(error))
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: PyTorch sees no CUDA device here (torch.cuda.is_available() is false)")
    if args.device == "cuda" and counts[-1] > torch.cuda.device_count():
        parser.error(f"--workers {args.workers}: one GPU a rank, and this machine has {torch.cuda.device_count()}")
    settings: list[tuple[int, int] | None] = []
    for given in args.examples or ["default"]:
        if given == "default":
            settings.append(None)
            continue
        try:
            fewest, most = (int(n) for n in given.split(","))
        except ValueError:
            parser.error(f"--examples must be two integers FEWEST,MOST or default, got {given!r}")
        if not 1 <= fewest <= most:
            parser.error(f"--examples needs 1 <= FEWEST <= MOST, got {given!r}")
        settings.append((fewest, most))
    tasks = args.tasks.split(",")
    if unknown := [t for t in tasks if t not in TASKS]:
        parser.error(f"--tasks: unknown {unknown}; allowed: {', '.join(TASKS)}")
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (the first and last rounds are not steady)")
    tuned = keep_freed_memory()  # before the first measurement: the floor and fedpub share one allocator setting
    device = torch.device(args.device)
    flops_per_second = matmul_flops_per_second(device)
    rows: list[dict[str, Any]] = []
    worker_rows: list[dict[str, Any]] = []
    paths: dict[tuple[str, int, str], str] = {}
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, torch threads {torch.get_num_threads()}"
    header = (
        f"# Throughput: {args.rounds} rounds per path, 1 local epoch, batch 16; examples per user: 'default' is "
        f"EMNIST 20-80, StackOverflow 5-30; {where}, float32 matmul {flops_per_second / 1e9:.0f} GFLOP/s; "
        f"torch {torch.__version__}; "
        f"allocator: {'glibc keeps freed memory (fedpub.simulations.run.memory)' if tuned else 'default'}; "
        f"{thread_line(THREADS, torch.get_num_threads())}; load average at start {load_average()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for examples in settings:
            label = "default" if examples is None else f"{examples[0]}-{examples[1]}"
            for task in tasks:
                for cohort in (int(c) for c in args.cohorts.split(",")):
                    started = time.perf_counter()
                    times, flops, choices, timing = measure(
                        task, cohort, args.rounds, Path(tmp), flower_max_gb=args.flower_max_gb,
                        pfl_python=args.pfl_python, examples=examples, device=args.device,
                    )
                    rows += _rows(task, cohort, label, times, flops, flops_per_second, timing["fedpub"])
                    paths[(task, cohort, label)] = _paths_note(choices)
                    if len(counts) > 1:
                        runs = measure_workers(task, cohort, args.rounds, Path(tmp), counts, examples=examples,
                                               device=args.device)
                        worker_rows += _worker_rows(task, cohort, label, runs)
                        times |= {f"fedpub-workers-{w}": run.rounds for w, run in runs.items()}
                    # after every cell: a later failure loses nothing measured
                    _write(rows, paths, args.out, header, worker_rows)
                    rounded = {k: [round(s, 3) for s, _ in v] for k, v in times.items()}
                    print(f"{task} cohort {cohort} examples {label}: {json.dumps(rounded)}"
                          f" ({time.perf_counter() - started:.0f} s)", flush=True)
    print(_write(rows, paths, args.out, header, worker_rows))


if __name__ == "__main__":
    main()
