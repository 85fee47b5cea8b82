"""``fedpub compare --jobs N``: several runs of a sweep at once, each in a spawned worker process. Real runs on the
tiny synthetic data: the same rows and metrics as one after the other (with the workers' torch threads), a real
Ctrl-C to a real ``fedpub compare`` subprocess, a worker killed, a failed run, and the option's checks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from fedpub.config import dump_config
from fedpub.simulations.tools.cli import app
from fedpub.simulations.tools.compare import load_sweep, run_sweep
from fedpub.simulations.tools.compare_report import read_csv
from fedpub.simulations.tools.sweep_jobs import AUTO, available_cores, parse_jobs, resolve_jobs, threads_per_job
from tests.conftest import tiny_config

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
ROUNDS = 100
"""Enough rounds (about 30 ms each here) that both runs under way are mid-run when the test stops them."""
SWEEP = {"rounds": ROUNDS, "eval_every": 25, "checkpoint_every": 1, "model": {"name": "emnist_mlp"},
         "strategy": {"sampling": {"kind": "fixed", "clients_per_round": 4}},
         "privacy": {"delta": 1e-5, "accountant": "rdp"}}
NAMES = [f"a__eps8__seed{seed}" for seed in (0, 1, 2)]
BOUND_S = 600
"""How long a sweep may take to reach a state the test waits for: a worker's start (spawn, import torch: about 10 s
on a busy 2-core machine) and a few rounds, with a wide margin."""


def _sweep_file(folder: Path, data_dir: Path, strategies: dict | None = None, seeds=(0, 1, 2), **base) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "base.yaml").write_text(dump_config(tiny_config(data_dir, folder / "runs", **{**SWEEP, **base})))
    sweep = {"base": "base.yaml", "name": "cmp", "epsilons": [8.0], "seeds": list(seeds),
             "strategies": strategies or {"a": {}}}
    (folder / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    return folder / "sweep.yaml"


def _runs(folder: Path) -> Path:
    return folder / "runs" / "cmp" / "runs"


def _rows(folder: Path) -> list[dict]:
    """compare.csv's rows; none before one."""
    path = folder / "runs" / "cmp" / "compare.csv"
    return read_csv(path) if path.exists() else []


def _same_results(folder: Path, reference: Path) -> None:
    assert _rows(folder) == _rows(reference)
    for name in NAMES:
        metrics = (_runs(folder) / name / "metrics.jsonl", _runs(reference) / name / "metrics.jsonl")
        assert metrics[0].read_bytes() == metrics[1].read_bytes(), name


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"waited {BOUND_S} s for {what}"
        time.sleep(0.05)


def _under_way(folder: Path) -> list[str]:
    """The runs holding a checkpoint and not finished (a finished run has its final_metrics.json)."""
    checkpoints = _runs(folder).glob("*/checkpoint.pt")
    return [p.parent.name for p in checkpoints if not (p.parent / "final_metrics.json").exists()]


needs_proc = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers in Linux's /proc")


def _workers(pid: int) -> list[int]:
    """The sweep process's worker processes (spawned by multiprocessing, from any of its threads; not its resource
    tracker)."""
    children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    return [c for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


@pytest.fixture(scope="module")
def reference(tiny_emnist_dir, tmp_path_factory) -> Path:
    """The sweep (3 runs of 100 rounds) run one after the other, with the torch threads each of 2 jobs gets."""
    folder = tmp_path_factory.mktemp("reference")
    threads = torch.get_num_threads()
    torch.set_num_threads(threads_per_job(2))
    try:
        with pytest.MonkeyPatch.context() as mp:  # the autouse per-test cache fixture does not reach module fixtures
            mp.setenv("FEDPUB_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "fedpub_cache"))
            result = run_sweep(load_sweep(_sweep_file(folder, tiny_emnist_dir)), console=None)
    finally:
        torch.set_num_threads(threads)
    assert result.failures == []
    return folder


def test_two_jobs_record_the_rows_and_metrics_of_one_after_the_other(reference, tiny_emnist_dir, tmp_path):
    path = _sweep_file(tmp_path, tiny_emnist_dir)
    result = runner.invoke(app, ["compare", str(path), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    _same_results(tmp_path, reference)  # compare.csv in the sweep's run order, whatever order the runs ended in
    threads = threads_per_job(2)
    assert (f"2 runs at once, each in its own process with {threads} torch thread{'s' * (threads > 1)} "
            f"({available_cores()} cores)") in result.output
    lines = result.output.splitlines()
    assert sum(line.endswith(": started") for line in lines) == 3
    ends = [line for line in lines if " done" in line]
    assert [line.rsplit("; ", 1)[1] for line in ends] == [f"{k} of 3 done" for k in (1, 2, 3)]
    assert all(f"after {ROUNDS} rounds" in line for line in ends)
    assert "round 1/" not in result.output  # no per-round progress from the workers

    again = runner.invoke(app, ["compare", str(path), "--jobs", "2"])
    assert again.exit_code == 0 and again.output.count("recorded, skipped") == 3, again.output
    assert "started" not in again.output and "at once" not in again.output  # nothing to run: no workers


@pytest.mark.extended  # one run's Ctrl-C and resume stay in the suite (test_faults.py)
@needs_proc
def test_ctrl_c_stops_every_run_under_way_checkpointed_and_the_rerun_resumes_them(reference, tiny_emnist_dir, tmp_path):
    path = _sweep_file(tmp_path, tiny_emnist_dir)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sweep = subprocess.Popen(  # a session of its own: the test sends its process group a terminal's Ctrl-C
        [sys.executable, "-c", "from fedpub.simulations.tools.cli import main; main()", "compare", str(path), "--jobs", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path, start_new_session=True,
    )
    try:
        _wait_for(lambda: len(_under_way(tmp_path)) == 2 or sweep.poll() is not None, "two runs under way")
        workers = _workers(sweep.pid)
        os.killpg(sweep.pid, signal.SIGINT)
        output = sweep.communicate(timeout=BOUND_S)[0]
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 130, output
    assert 1 <= len(workers) <= 2 and not [w for w in workers if Path(f"/proc/{w}").exists()], output  # none left
    recorded = {f"a__eps8__seed{row['seed']}" for row in _rows(tmp_path)}
    stopped = 0
    for name in NAMES:
        run = _runs(tmp_path) / name
        if name in recorded or not run.exists():  # finished before the Ctrl-C, or never started
            continue
        stopped += 1
        done = torch.load(run / "checkpoint.pt", weights_only=True)["rounds_done"]
        assert 1 <= done < ROUNDS
        metrics = [json.loads(line)["round"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert metrics == list(range(done))  # nothing past the checkpoint
        assert json.loads((run / "ledger.json").read_text())["rounds"] == done
        assert f"interrupted: {run}/ holds {done} of {ROUNDS} rounds, checkpointed" in output
        assert not (run / ".lock").exists()
    assert stopped >= 1, output
    assert "SIGINT: no further run starts; the runs under way" in output
    assert f"resume with: fedpub compare {path} --jobs 2" in output

    resumed = runner.invoke(app, ["compare", str(path), "--jobs", "2"])
    assert resumed.exit_code == 0, resumed.output
    _same_results(tmp_path, reference)


@pytest.mark.slow
@pytest.mark.extended
@needs_proc
def test_a_killed_worker_fails_the_runs_under_way_the_rest_go_on_and_the_rerun_resumes(
    reference, tiny_emnist_dir, tmp_path
):
    path = _sweep_file(tmp_path, tiny_emnist_dir)
    killed: list[int] = []
    returned = threading.Event()

    def kill_a_worker() -> None:
        _wait_for(lambda: len(_under_way(tmp_path)) == 2 or returned.is_set(), "two runs under way")
        if not returned.is_set():
            killed.append(_workers(os.getpid())[0])
            os.kill(killed[0], signal.SIGKILL)  # as the out-of-memory killer does

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    killer.start()
    result = runner.invoke(app, ["compare", str(path), "--jobs", "2"])
    returned.set()
    killer.join()
    assert killed and result.exit_code == 1, result.output
    assert "2 of 3 runs failed" in result.output and result.output.count("ended abruptly") >= 2
    assert len(_rows(tmp_path)) == 1  # the run not under way when the worker died ran (in a new pool, if still to do)
    assert not Path(f"/proc/{killed[0]}").exists()

    resumed = runner.invoke(app, ["compare", str(path), "--jobs", "2"])
    assert resumed.exit_code == 0 and "recorded, skipped" in resumed.output, resumed.output
    _same_results(tmp_path, reference)


def test_a_failed_run_is_listed_and_the_others_finish(tiny_emnist_dir, tmp_path):
    broken = {"data": {"source": "emnist_h5", "path": str(tmp_path / "nowhere")}}
    path = _sweep_file(tmp_path, tiny_emnist_dir, {"broken": broken, "ok": {}}, seeds=[0], rounds=2)
    result = runner.invoke(app, ["compare", str(path), "--jobs", "auto"])
    assert result.exit_code == 1, result.output
    assert "1 of 2 runs failed" in result.output and "broken ε=8 seed 0:" in result.output
    assert "fed_emnist_digitsonly_train.h5" in result.output and "of 2 done" in result.output
    assert [r["strategy"] for r in _rows(tmp_path)] == ["ok"]


@pytest.mark.parametrize("jobs", ["2", "auto", "0"])
def test_jobs_on_flower_simulation_is_refused_saying_why(tmp_path, jobs):
    result = runner.invoke(app, ["compare", str(tmp_path / "sweep.yaml"), "--jobs", jobs, "--backend", "flower"])
    assert result.exit_code == 2 and "Ray runs its clients in parallel" in result.output, result.output


@pytest.mark.parametrize("jobs", ["-1", "two", "1.5"])
def test_a_bad_jobs_value_is_refused_naming_what_is_allowed(tmp_path, jobs):
    result = runner.invoke(app, ["compare", str(tmp_path / "sweep.yaml"), "--jobs", jobs])
    assert result.exit_code == 2 and "--jobs must be a number of runs at once" in result.output, result.output


def test_auto_is_one_job_per_core_at_most_one_per_run_and_threads_share_the_cores():
    assert parse_jobs("auto") == parse_jobs("0") == AUTO and parse_jobs("3") == 3
    cores = available_cores()
    assert resolve_jobs(AUTO, 1000) == cores and resolve_jobs(AUTO, 1) == 1 and resolve_jobs(AUTO, 0) == 1
    assert resolve_jobs(5, 2) == 5
    assert threads_per_job(1) == cores and threads_per_job(cores) == 1 and threads_per_job(4 * cores) == 1
