"""The benchmarks' round on many workers (``simulations/benchmarks/workers.py`` and the throughput benchmark's
``--workers``): the scaling table's arithmetic, the worker counts and threads a rank gets, and one small cell
measured end to end on one process and on two torchrun ranks."""

from __future__ import annotations

import pytest

from fedpub.config import parse_config
from fedpub.simulations.benchmarks.throughput import WorkerRun, _config, _worker_rows, measure_workers
from fedpub.simulations.benchmarks.workers import (
    cores, parse_workers, rank_environment, rss_note, scaling_efficiency, speedup,
)
from fedpub.simulations.run.experiment import build_experiment


def test_speedup_is_t1_over_tw_and_efficiency_is_the_speedup_per_worker():
    assert speedup(1.0, 0.5) == 2.0 and scaling_efficiency(1.0, 0.5, 2) == 1.0
    assert speedup(1.0, 0.8) == 1.25 and scaling_efficiency(1.0, 0.8, 2) == 0.625
    assert scaling_efficiency(1.0, 1.0, 4) == 0.25  # four workers, no faster


def test_the_worker_table_gives_the_median_steady_round_its_speedup_and_efficiency_per_worker_count():
    """Round 0 (start-up) and the last (it evaluates) are not steady, nor a round in which that run timed its
    paths; each worker count's median is over its own steady rounds."""
    one = WorkerRun([(9.0, 5), (1.0, 5), (1.2, 5), (0.8, 5), (9.0, 5)], [], [600.0], 2, 3.5)
    two = WorkerRun([(9.0, 5), (7.0, 5), (0.5, 5), (0.9, 5), (9.0, 5)], [1], [540.4, 530.6], 1, 4.0)
    rows = {r["workers"]: r for r in _worker_rows("emnist_mlp", 5, "5-30", {1: one, 2: two})}
    assert rows[1]["round_s"] == 1.0 and rows[1]["steady_rounds"] == 3
    assert rows[2]["round_s"] == 0.7 and rows[2]["steady_rounds"] == 2  # round 1 timed its paths: left out
    assert rows[1]["speedup"] == 1.0 and rows[1]["scaling_efficiency"] == 1.0
    assert rows[2]["speedup"] == round(1.0 / 0.7, 2) and rows[2]["scaling_efficiency"] == round(1.0 / 1.4, 2)
    assert rows[2]["peak_rss_mib_by_rank"] == "540/531" and rows[2]["threads_per_rank"] == 1
    assert rows[2]["load_avg"] == 4.0


def test_worker_counts_must_include_one_and_be_positive():
    assert parse_workers("2,1,2") == [1, 2]
    for bad in ("2", "0,1", "1,two"):
        with pytest.raises(ValueError, match="--workers"):
            parse_workers(bad)


def test_each_rank_gets_its_share_of_the_cores_unless_omp_num_threads_is_set():
    assert rank_environment(1, {})["OMP_NUM_THREADS"] == str(cores())
    assert rank_environment(2 * cores(), {})["OMP_NUM_THREADS"] == "1"  # more ranks than cores: one thread each
    assert rank_environment(2, {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"
    assert rss_note([612.4, 598.6]) == "612/599"


def test_one_cell_measured_on_two_torchrun_ranks(tmp_path):
    """A cell on two gloo ranks: the cell's cohorts each round (the run has the cell's name: the cohorts the
    floor and the one-process run train), rank 0's rounds timed, one peak RSS per rank, each rank's threads."""
    runs = measure_workers("emnist_mlp", 6, 3, tmp_path, [2], examples=(5, 10))
    experiment = build_experiment(parse_config(_config("emnist_mlp", 6, 3, tmp_path, examples=(5, 10))))
    cohorts = [len(experiment.strategy.sample_cohort(experiment.private_ids, t)) for t in range(3)]
    assert [users for _, users in runs[2].rounds] == cohorts and len(set(cohorts)) > 1
    assert all(seconds > 0 for seconds, _ in runs[2].rounds)
    assert len(runs[2].peak_rss_mib) == 2 and all(mib > 50 for mib in runs[2].peak_rss_mib)  # torch alone holds more
    assert runs[2].threads == int(rank_environment(2)["OMP_NUM_THREADS"])  # cores // 2, or as set
