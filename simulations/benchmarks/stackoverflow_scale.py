"""Does fedpub's StackOverflow path scale to TFF's population? Time and memory at 342,477 clients.

Run from the repository root: ``python -m fedpub.simulations.benchmarks.stackoverflow_scale [--clients 342477]
[--cohort 1000] [--layouts sqlite h5] [--workers 1,2]``. For each layout (default: TFF's SQLite layout alone; HDF5
creates an object per client and field, about 15 minutes at 342k clients) it writes a synthetic StackOverflow split
(:mod:`fedpub.data.stackoverflow_writers`; TFF's train split has 342,477 clients) and then, in a fresh process,
opens it and lists the clients, loads the 10,000-word and 500-tag vocabularies, samples a cohort with a numpy
generator, and builds the cohort's tag-prediction features (:class:`~fedpub.data.stackoverflow_tasks.TagPrediction`)
and next-word ids, then runs one DP round of that cohort (the in-process engine's training and clip, sum and
noise on the tag logistic regression). Each phase runs in its own spawned process so that its peak RSS (``resource.getrusage``,
``ru_maxrss``) is its own; per step the table shows seconds, the process's peak RSS after the step, and the peak of
Python allocations during a second run of the step under ``tracemalloc`` (after all timed runs; it does not see
HDF5's or SQLite's C memory).

With ``--workers 1,2`` the cohort's round also runs on each worker count W > 1: W torchrun ranks (gloo) on
127.0.0.1 (:mod:`fedpub.simulations.benchmarks.workers`: ``cores // W`` torch threads a rank unless
``OMP_NUM_THREADS`` is set), each of which opens and lists the file, samples the same cohort, builds the features
of its share of it (the users split by example count, as ``fedpub run`` under torchrun splits them) and trains
them; the per-user part of the round (clip) runs on each rank, the clipped sums are all-reduced and every rank
finishes the round from that sum (the same seeded noise). The ``workers`` column says how many processes a row's
steps ran on; a W > 1 row's seconds are the slowest rank's and its peak RSS is each rank's (``rank 0/rank 1``),
without a tracemalloc pass. The summary below the table gives the round's seconds, speedup t1 / tW, scaling
efficiency t1 / (W · tW) and peak RSS per worker count. The round is on the CPU (one GPU a rank is ``fedpub run``'s
and the throughput benchmark's ``--device cuda``). Every row ends with the machine's 1-minute load average
(other processes' work beside the benchmark's).

Measured (issue 35, 2 cores under a load average of 8 from other processes, ``OMP_NUM_THREADS=1``): the SQLite file
of 342,477 clients (197 MiB) written in 124 s; listing them 1.7 s; the 1,000-user cohort's features 3.3 s; its DP
round 19.8 s, the process's peak RSS 669 MiB.
With ``--workers 1,2`` (issue 35.4, 2 cores, load average 1.5, threads sleeping, 2 threads for one process and 1 a
rank): the file written in 11.7 s; the 1,000-user round 1.58 s on one process (peak RSS 665 MiB) and 0.91 s on two
ranks (649 and 649 MiB): speedup 1.74, scaling efficiency 0.87; with ``OMP_NUM_THREADS=1`` (one thread everywhere,
load 1.4) 1.66 s against 0.94 s (1.77, 0.88).
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing as mp
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fedpub.simulations.benchmarks import THREADS
from fedpub.simulations.benchmarks.workers import (
    MIB, launch, load_average, parse_workers, peak_rss_by_rank, peak_rss_mib, rss_note, scaling_efficiency, speedup,
)
from fedpub.simulations.tools.threads import thread_line

ROUND = "one DP round of the cohort (so_tag_logreg)"


class _Steps:
    """Runs the steps timed, in order, recording the peak RSS after each; ``trace`` then re-runs every step under
    tracemalloc for its Python-heap peak (afterwards, so that the re-runs do not raise the RSS of later steps)."""

    def __init__(self) -> None:
        self.rows: list[list[Any]] = [["imports (baseline)", None, peak_rss_mib(), None, load_average()]]
        self._fns: list[tuple[int, Callable[[], Any]]] = []

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        result = fn()
        self.rows.append([name, time.perf_counter() - start, peak_rss_mib(), None, load_average()])
        self._fns.append((len(self.rows) - 1, fn))
        return result

    def trace(self) -> list[list[Any]]:
        for index, fn in self._fns:
            tracemalloc.start()
            fn()
            self.rows[index][3] = tracemalloc.get_traced_memory()[1] / MIB
            tracemalloc.stop()
        return self.rows


def _generate(directory: str, layout: str, clients: int, seed: int) -> list[list[Any]]:
    from fedpub.data.stackoverflow_writers import SyntheticStackOverflowSpec, write_synthetic_stackoverflow

    spec = SyntheticStackOverflowSpec(num_clients=clients, min_examples=1, max_examples=3, seed=seed)
    start = time.perf_counter()
    files = write_synthetic_stackoverflow(directory, spec, layout=layout)  # type: ignore[arg-type]
    seconds = time.perf_counter() - start
    size = files.data.stat().st_size / MIB
    return [[f"write {files.data.name} ({size:.0f} MiB) and the count files", seconds, peak_rss_mib(), None,
             load_average()]]


def _read(directory: str, layout: str, cohort: int, seed: int) -> list[list[Any]]:
    from fedpub.data.stackoverflow_tasks import NextWordPrediction, TagPrediction, load_vocabularies
    from fedpub.seeding import numpy_generator

    root = Path(directory)
    steps = _Steps()
    reader = steps.run("open + list clients", lambda: _open_reader(root, layout))
    ids = reader.client_ids
    words, tags = steps.run(
        "load vocabularies (10,000 words, 500 tags)",
        lambda: load_vocabularies(root / "stackoverflow.word_count", root / "stackoverflow.tag_count"),
    )
    chosen = steps.run(
        f"sample a cohort of {cohort:,}",
        lambda: [ids[i] for i in sorted(numpy_generator(seed, "cohort").choice(len(ids), cohort, replace=False))],
    )
    counts = steps.run("num_examples of the cohort", lambda: [reader.num_examples(c) for c in chosen])
    task = TagPrediction(reader, words, tags)
    features = steps.run("tag-prediction features of the cohort (kept)", lambda: [task.client_data(c) for c in chosen])
    nwp = NextWordPrediction(reader, words)
    steps.run("next-word ids of the cohort", lambda: [nwp.client_data(c) for c in chosen])
    steps.run("import the round's modules (trainer, model, strategy)", _import_round)
    steps.run(ROUND, lambda: _dp_round(features, len(ids), seed))
    rows = steps.trace()
    x_mib = sum(d.x.numel() * d.x.element_size() for d in features) / MIB
    summary = f"  {len(ids):,} clients; cohort: {sum(counts):,} examples, features {x_mib:.0f} MiB"
    rows.append([summary, None, None, None, None])
    return rows


def _open_reader(root: Path, layout: str) -> Any:
    from fedpub.data.stackoverflow import StackOverflowH5, StackOverflowSqlite

    if layout == "h5":
        return StackOverflowH5(root / "stackoverflow_train.h5")
    return StackOverflowSqlite(root / "stackoverflow.sqlite", "train")


def _rank_read(directory: str, layout: str, cohort: int, seed: int, result_file: str) -> None:
    """One torchrun rank of the round on many workers: open and list the file, sample the cohort (every rank the
    same), build the features of this rank's share (split by example count) and run its part of the round; rank 0
    writes the rows (each step's slowest rank's seconds, every rank's peak RSS after it) to ``result_file``."""
    import torch
    import torch.distributed as dist

    from fedpub.data.stackoverflow_tasks import TagPrediction, load_vocabularies
    from fedpub.seeding import numpy_generator
    from fedpub.simulations.run.distributed import Workers, launched, split_by_work

    where = launched()
    if where is None:
        raise SystemExit("--rank-read runs under torchrun (stackoverflow_scale --workers starts it)")
    dist.init_process_group("gloo")
    workers = Workers(where, torch.device("cpu"), owned=True)
    root = Path(directory)
    timed: list[tuple[str, float, list[float]]] = []

    def step(name: str, fn: Callable[[], Any]) -> Any:
        dist.barrier()
        start = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - start
        slowest: list[float] = [0.0] * workers.world_size
        dist.all_gather_object(slowest, seconds)
        timed.append((name, max(slowest), peak_rss_by_rank()))
        return result

    try:
        reader = step("open + list clients", lambda: _open_reader(root, layout))
        ids = reader.client_ids
        words, tags = load_vocabularies(root / "stackoverflow.word_count", root / "stackoverflow.tag_count")
        chosen = [ids[i] for i in sorted(numpy_generator(seed, "cohort").choice(len(ids), cohort, replace=False))]
        shares = split_by_work([reader.num_examples(c) for c in chosen], workers.world_size)
        mine = shares[workers.rank]
        task = TagPrediction(reader, words, tags)
        features = step("tag-prediction features of the rank's share",
                        lambda: [task.client_data(chosen[i]) for i in mine])
        step(ROUND, lambda: _dp_round(features, len(ids), seed, users=mine, sampled=cohort, workers=workers))
    finally:
        workers.close()
    if workers.is_root:
        Path(result_file).write_text(json.dumps(
            [[name, seconds, rss_note(peaks), None, load_average()] for name, seconds, peaks in timed]
        ))


def _import_round() -> None:
    """Import what :func:`_dp_round` uses, so that its seconds are the round's (a rank of :func:`_rank_read` has
    imported them with torch.distributed's part of fedpub before its round starts)."""
    for module in ("fedpub.clients.cohort_training", "fedpub.models", "fedpub.strategies.compose", "fedpub.tasks"):
        importlib.import_module(module)


def _dp_round(
    features: list[Any], population: int, seed: int, *, users: Sequence[int] | None = None,
    sampled: int | None = None, workers: Any = None,
) -> None:
    """The in-process engine's work on a cohort of users: each trains the 5M-parameter tag logistic regression
    for one epoch of batch-16 SGD (cut to the columns of its words), then the server clips, sums and noises
    their updates (DP-FedAvg, z = 1). With ``workers`` (a :class:`~fedpub.simulations.run.distributed.Workers`):
    ``features`` are this rank's share, the users at positions ``users`` of a cohort of ``sampled``; each rank
    clips its own, the sums are all-reduced and every rank finishes the round from that sum, as under torchrun."""
    import torch

    from fedpub.clients.cohort_training import CohortTrainer
    from fedpub.clients.local_training import LocalTrainingConfig
    from fedpub.config import StrategyConfig
    from fedpub.models import build_model
    from fedpub.models.seeded import model_params
    from fedpub.privacy.events import PoissonSampling
    from fedpub.seeding import torch_generator
    from fedpub.strategy import usable_rows
    from fedpub.tasks import get_task
    from fedpub.strategies.compose import build_strategy

    users = range(len(features)) if users is None else users
    sampled = len(features) if sampled is None else sampled
    model = build_model("so_tag_logreg", 500)
    params = model_params(model)
    trainer = CohortTrainer(model, LocalTrainingConfig(batch_size=16, lr=0.05), get_task("so_tag"), path="loop")
    generators = [torch_generator(seed, 0, "client", str(i)) for i in users]
    results = trainer.train(params, features, generators, sparse_updates=True)
    core = build_strategy(
        StrategyConfig(clip_norm=0.5, noise_multiplier=1.0), sampling=PoissonSampling(sampled / population),
        population=population, noise_multiplier=1.0, seed=seed, rounds=1,
    )
    if workers is None:
        outcome = core.aggregate(params, [r.update for r in results], core.init(params), 0)
    else:
        prep = core.prepare_round(params, core.init(params), 0, sampled=sampled)
        mapped = core.per_user(usable_rows([r.update for r in results], params), prep)
        summed = workers.all_reduce_sum(mapped.updates.sum(), len(mapped.updates), mapped.tally_sums(), 0)
        total, count, tallies = summed
        outcome = core.finish_from_sum(prep, total, count, tallies)
    assert all(torch.isfinite(v).all() for v in outcome.params.values())


def _in_child(fn: Callable[..., Any], *args: Any) -> Any:
    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def _row(layout: str, workers: int, name: str, seconds: float | None, rss: float | str | None,
         traced: float | None, load: float | None) -> str:
    cells = [
        f"{seconds:9.2f}" if seconds is not None else f"{'':9}",
        (f"{rss:>13}" if isinstance(rss, str) else f"{rss:13.0f}") if rss is not None else f"{'':13}",
        f"{traced:11.1f}" if traced is not None else f"{'-' if rss is not None else '':>11}",
        f"{load:5.1f}" if load is not None else "",
    ]
    return f"{layout:7} {workers:>7} {name:58} {' '.join(cells)}".rstrip()


def _round_summary(layout: str, rounds: dict[int, tuple[float, float | str, float]]) -> list[str]:
    """Per worker count: the round's seconds, speedup t1 / tW, scaling efficiency t1 / (W · tW), peak RSS, load."""
    one = rounds[1][0]
    lines = [f"{layout}: {ROUND}, per worker count", f"{'workers':>7} {'round_s':>8} {'speedup':>8} "
             f"{'scaling_efficiency':>18} {'peak RSS MiB':>13} {'load':>5}"]
    for workers, (seconds, rss, load) in rounds.items():
        rss_text = rss if isinstance(rss, str) else f"{rss:.0f}"
        lines.append(f"{workers:>7} {seconds:8.2f} {speedup(one, seconds):8.2f} "
                     f"{scaling_efficiency(one, seconds, workers):18.2f} {rss_text:>13} {load:5.1f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=342_477)
    parser.add_argument("--cohort", type=int, default=1_000)
    parser.add_argument("--layouts", nargs="+", choices=["h5", "sqlite"], default=["sqlite"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", default="1", metavar="1,2",
                        help="worker counts of the cohort's round (torchrun's gloo ranks on 127.0.0.1; threads = "
                             "cores / W unless OMP_NUM_THREADS is set)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--rank-read", nargs=5, metavar=("DIR", "LAYOUT", "COHORT", "SEED", "RESULT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_read:
        directory, layout, cohort, seed, result = args.rank_read
        _rank_read(directory, layout, int(cohort), int(seed), result)
        return
    try:
        counts = parse_workers(args.workers)
    except ValueError as error:
        parser.error(str(error))

    import torch

    print(thread_line(THREADS, torch.get_num_threads()))
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        print(f"{'layout':7} {'workers':>7} {'step':58} {'seconds':>9} {'peak RSS MiB':>13} {'traced MiB':>11} "
              f"{'load':>5}")
        summaries: list[str] = []
        for layout in args.layouts:
            folder = Path(scratch) / layout
            folder.mkdir()
            rows = _in_child(_generate, str(folder), layout, args.clients, args.seed)
            rows += _in_child(_read, str(folder), layout, args.cohort, args.seed)
            rounds = {1: next((r[1], r[2], r[4]) for r in rows if r[0] == ROUND)}
            for row in rows:
                print(_row(layout, 1, *row), flush=True)
            for workers in counts[1:]:
                result = Path(scratch) / f"{layout}_{workers}.json"
                program = ["-m", "fedpub.simulations.benchmarks.stackoverflow_scale", "--rank-read", str(folder),
                           layout, str(args.cohort), str(args.seed), str(result)]
                launch(workers, program, timeout=3600)
                for row in json.loads(result.read_text()):
                    print(_row(layout, workers, *row), flush=True)
                    if row[0] == ROUND:
                        rounds[workers] = (row[1], row[2], row[4])
            if len(counts) > 1:
                summaries += ["", *_round_summary(layout, rounds)]
        print("\n".join(summaries))


if __name__ == "__main__":
    main()
