"""Does fedpub's StackOverflow path scale to TFF's population? Time and memory at 342,477 clients.

Run from the repository root: ``python -m fedpub.simulations.benchmarks.stackoverflow_scale [--clients 342477]
[--cohort 1000] [--layouts sqlite h5]``. For each layout (default: TFF's SQLite layout alone; HDF5 creates an object
per client and field, about 15 minutes at 342k clients) it writes a synthetic StackOverflow split
(:mod:`fedpub.data.stackoverflow_writers`; TFF's train split has 342,477 clients) and then, in a fresh process,
opens it and lists the clients, loads the 10,000-word and 500-tag vocabularies, samples a cohort with a numpy
generator, and builds the cohort's tag-prediction features (:class:`~fedpub.data.stackoverflow_tasks.TagPrediction`)
and next-word ids, then runs one DP round of that cohort (the in-process engine's training and clip, sum and
noise on the tag logistic regression). Each phase runs in its own spawned process so that its peak RSS (``resource.getrusage``,
``ru_maxrss``) is its own; per step the table shows seconds, the process's peak RSS after the step, and the peak of
Python allocations during a second run of the step under ``tracemalloc`` (after all timed runs; it does not see
HDF5's or SQLite's C memory).

The ``workers`` column is the number of processes the round ran on: 1 here (the in-process engine); the
multi-worker round on torch.distributed adds its rows per worker count there.

Measured (issue 35, 2 cores under a load average of 8 from other processes, ``OMP_NUM_THREADS=1``): the SQLite file
of 342,477 clients (197 MiB) written in 124 s; listing them 1.7 s; the 1,000-user cohort's features 3.3 s; its DP
round 19.8 s, the process's peak RSS 669 MiB.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

MIB = 2**20
WORKERS = 1
"""Processes the round runs on (the ``workers`` column): one, the in-process engine."""


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB  # Linux reports KiB


class _Steps:
    """Runs the steps timed, in order, recording the peak RSS after each; ``trace`` then re-runs every step under
    tracemalloc for its Python-heap peak (afterwards, so that the re-runs do not raise the RSS of later steps)."""

    def __init__(self) -> None:
        self.rows: list[list[Any]] = [["imports (baseline)", None, _peak_rss_mib(), None]]
        self._fns: list[tuple[int, Callable[[], Any]]] = []

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        result = fn()
        self.rows.append([name, time.perf_counter() - start, _peak_rss_mib(), None])
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
    return [[f"write {files.data.name} ({size:.0f} MiB) and the count files", seconds, _peak_rss_mib(), None]]


def _read(directory: str, layout: str, cohort: int, seed: int) -> list[list[Any]]:
    from fedpub.data.stackoverflow import StackOverflowH5, StackOverflowSqlite
    from fedpub.data.stackoverflow_tasks import NextWordPrediction, TagPrediction, load_vocabularies
    from fedpub.seeding import numpy_generator

    root = Path(directory)
    steps = _Steps()

    def open_reader() -> StackOverflowH5 | StackOverflowSqlite:
        if layout == "h5":
            return StackOverflowH5(root / "stackoverflow_train.h5")
        return StackOverflowSqlite(root / "stackoverflow.sqlite", "train")

    reader = steps.run("open + list clients", open_reader)
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
    steps.run("one DP round of the cohort (so_tag_logreg)", lambda: _dp_round(features, len(ids), seed))
    rows = steps.trace()
    x_mib = sum(d.x.numel() * d.x.element_size() for d in features) / MIB
    summary = f"  {len(ids):,} clients; cohort: {sum(counts):,} examples, features {x_mib:.0f} MiB"
    rows.append([summary, None, None, None])
    return rows


def _dp_round(features: list[Any], population: int, seed: int) -> None:
    """The in-process engine's work on a cohort of users: each trains the 5M-parameter tag logistic regression
    for one epoch of batch-16 SGD (cut to the columns of its words), then the server clips, sums and noises
    their updates (DP-FedAvg, z = 1)."""
    import torch

    from fedpub.clients.cohort_training import CohortTrainer
    from fedpub.clients.local_training import LocalTrainingConfig
    from fedpub.config import StrategyConfig
    from fedpub.models import build_model
    from fedpub.models.seeded import model_params
    from fedpub.privacy.events import PoissonSampling
    from fedpub.seeding import torch_generator
    from fedpub.tasks import get_task
    from fedpub.strategies.compose import build_strategy

    model = build_model("so_tag_logreg", 500)
    params = model_params(model)
    trainer = CohortTrainer(model, LocalTrainingConfig(batch_size=16, lr=0.05), get_task("so_tag"), path="loop")
    generators = [torch_generator(seed, 0, "client", str(i)) for i in range(len(features))]
    results = trainer.train(params, features, generators, sparse_updates=True)
    core = build_strategy(
        StrategyConfig(clip_norm=0.5, noise_multiplier=1.0), sampling=PoissonSampling(len(features) / population),
        population=population, noise_multiplier=1.0, seed=seed, rounds=1,
    )
    outcome = core.aggregate(params, [r.update for r in results], core.init(params), 0)
    assert all(torch.isfinite(v).all() for v in outcome.params.values())


def _in_child(fn: Callable[..., Any], *args: Any) -> Any:
    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=342_477)
    parser.add_argument("--cohort", type=int, default=1_000)
    parser.add_argument("--layouts", nargs="+", choices=["h5", "sqlite"], default=["sqlite"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        print(f"{'layout':7} {'workers':>7} {'step':58} {'seconds':>9} {'peak RSS MiB':>13} {'traced MiB':>11}")
        for layout in args.layouts:
            folder = Path(scratch) / layout
            folder.mkdir()
            rows = _in_child(_generate, str(folder), layout, args.clients, args.seed)
            rows += _in_child(_read, str(folder), layout, args.cohort, args.seed)
            for name, seconds, rss, traced in rows:
                cells = [
                    f"{seconds:9.2f}" if seconds is not None else f"{'':9}",
                    f"{rss:13.0f}" if rss is not None else f"{'':13}",
                    f"{traced:11.1f}" if traced is not None else f"{'-' if rss is not None else '':>11}",
                ]
                print(f"{layout:7} {WORKERS:>7} {name:58} {' '.join(cells)}".rstrip())


if __name__ == "__main__":
    main()
