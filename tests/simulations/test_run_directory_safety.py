"""One writer per run directory, interrupted runs that leave nothing ahead of their checkpoint, resuming and
finished runs, progress off a terminal, ``--set``, ``--dry-run`` and device strings: the real CLI (typer's runner,
whose output is not a terminal, or a subprocess), a real second process holding the lock, a real SIGINT."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from fedpub.config import ConfigError, dump_config
from fedpub.simulations.tools.cli import app
from fedpub.simulations.tools.compare import load_sweep
from fedpub.simulations.run.engine import run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory, RunDirectoryError
from fedpub.simulations.run.run_lock import RunDirectoryLocked, RunLock
from tests.conftest import tiny_config

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _config_file(tmp_path: Path, data_dir: Path, **overrides) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(dump_config(tiny_config(data_dir, tmp_path / "runs", **overrides)))
    return path


def _rounds(path: Path) -> list[int]:
    return [json.loads(line)["round"] for line in path.read_text().splitlines()]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def test_a_second_process_holding_the_run_directory_is_refused_naming_it(tiny_emnist_dir, tmp_path):
    config = _config_file(tmp_path, tiny_emnist_dir, rounds=1)
    root = tmp_path / "runs" / "tiny"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from fedpub.simulations.run.run_lock import RunLock
            RunLock({str(root)!r}).acquire()
            print("locked", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env(), cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        refused = runner.invoke(app, ["run", str(config)])
        assert refused.exit_code == 2, refused.output
        assert f"PID {holder.pid} on {socket.gethostname()}" in refused.output and "-c" in refused.output
        with pytest.raises(RunDirectoryLocked, match=f"PID {holder.pid}"):
            run_in_process(build_experiment(tiny_config(tiny_emnist_dir, tmp_path / "runs", rounds=1)),
                           RunDirectory(root))
        assert sorted(p.name for p in root.iterdir()) == [".lock"]  # the refused runs wrote nothing
    finally:
        holder.kill()  # SIGKILL: no clean-up runs, and the kernel drops the lock
        holder.wait()
    result = runner.invoke(app, ["run", str(config)])
    assert result.exit_code == 0, result.output
    assert not (root / ".lock").exists()  # released when the run ended


def test_a_sweep_directory_in_use_is_refused(tiny_emnist_dir, tmp_path):
    (tmp_path / "base.yaml").write_text(dump_config(tiny_config(tiny_emnist_dir, tmp_path / "runs", rounds=1)))
    sweep = {"base": "base.yaml", "name": "cmp", "epsilons": [4.0], "seeds": [0], "strategies": {"a": {}}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    with RunLock(tmp_path / "runs" / "cmp", "sweep directory"):  # another open file: refused like a process
        result = runner.invoke(app, ["compare", str(tmp_path / "sweep.yaml")])
    assert result.exit_code == 2 and f"PID {os.getpid()}" in result.output, result.output


def test_a_run_cut_short_mid_round_keeps_no_record_past_its_checkpoint(tiny_emnist_dir, tmp_path):
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=5, checkpoint_every=2)

    def stop_in_round_3(record):
        if record["round"] == 2:
            raise KeyboardInterrupt  # as a second Ctrl-C does, after round 3's records were written

    run_dir = RunDirectory(tmp_path / "tiny")
    with pytest.raises(KeyboardInterrupt):
        run_in_process(build_experiment(cfg), run_dir, on_round=stop_in_round_3)
    assert run_dir.load_checkpoint()["rounds_done"] == 2
    assert _rounds(run_dir.metrics_path) == _rounds(run_dir.diagnostics_path) == [0, 1]
    assert json.loads(run_dir.ledger_path.read_text())["rounds"] == 2


def test_a_stop_signal_during_a_failed_runs_cleanup_waits_for_it(tiny_emnist_dir, tmp_path, monkeypatch):
    """torchrun sends SIGTERM to the other ranks when one dies: arriving while a failed run removes its records past
    the checkpoint, it used to end the process mid-write (a temporary file left behind); the cleanup finishes first
    and the run's own error is what comes out."""
    cfg = tiny_config(tiny_emnist_dir, tmp_path, rounds=5, checkpoint_every=2)
    truncate, before = RunDirectory.truncate_records, signal.getsignal(signal.SIGTERM)

    def signalled_mid_cleanup(self, rounds_done):
        os.kill(os.getpid(), signal.SIGTERM)  # SIGTERM's default would end the process here
        truncate(self, rounds_done)

    def fail_in_round_3(record):
        if record["round"] == 2:
            monkeypatch.setattr(RunDirectory, "truncate_records", signalled_mid_cleanup)
            raise RuntimeError("a collective failed")

    run_dir = RunDirectory(tmp_path / "tiny")
    with pytest.raises(RuntimeError, match="a collective failed"):
        run_in_process(build_experiment(cfg), run_dir, on_round=fail_in_round_3)
    assert _rounds(run_dir.metrics_path) == [0, 1] and not list(run_dir.root.glob(".*.tmp"))
    assert signal.getsignal(signal.SIGTERM) is before  # the default, or what an earlier test's library installed


def test_an_interrupt_before_an_atomic_write_starts_leaves_no_temporary_file(tmp_path, monkeypatch):
    from fedpub.atomic import write_text_atomic

    target = tmp_path / "kept.txt"
    target.write_text("old")

    def interrupted(path, mode):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "chmod", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(target, "new")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]


def test_a_run_directory_moved_with_its_folder_resumes_at_its_new_place(tiny_emnist_dir, tmp_path):
    """``output_dir`` is where the runs are written, not what they compute: a folder of runs (a reproduction's)
    moved elsewhere resumes there, and the run equals one never stopped nor moved."""
    def config(where: Path, rounds: int = 4):
        return tiny_config(tiny_emnist_dir, where, rounds=rounds, checkpoint_every=1)

    def stop_after_round_2(record):
        if record["round"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_in_process(build_experiment(config(tmp_path / "before")), RunDirectory(tmp_path / "before" / "tiny"),
                       on_round=stop_after_round_2)
    (tmp_path / "before").rename(tmp_path / "after")
    moved = RunDirectory(tmp_path / "after" / "tiny")
    assert moved.load_checkpoint()["rounds_done"] == 2
    result = run_in_process(build_experiment(config(tmp_path / "after")), moved)
    assert _rounds(moved.metrics_path) == [0, 1, 2, 3] and json.loads(moved.ledger_path.read_text())["rounds"] == 4
    assert yaml.safe_load(moved.config_path.read_text())["output_dir"] == str(tmp_path / "after")
    whole = run_in_process(build_experiment(config(tmp_path / "whole")), RunDirectory(tmp_path / "whole" / "tiny"))
    assert result.final_metrics == whole.final_metrics
    with pytest.raises(RunDirectoryError, match=r"changed: rounds\)"):  # what the run computes is still checked
        run_in_process(build_experiment(config(tmp_path / "after", rounds=5)), moved)


def test_ctrl_c_stops_at_the_round_end_checkpointed_and_the_rerun_resumes(tiny_emnist_dir, tmp_path):
    # checkpoint_every 1000: without the stop's checkpoint, metrics.jsonl would run ahead of checkpoint.pt
    config = _config_file(tmp_path, tiny_emnist_dir, rounds=24, eval_every=2, checkpoint_every=1000,
                          model={"name": "emnist_mlp"})
    run = subprocess.Popen(
        [sys.executable, "-c", "from fedpub.simulations.tools.cli import main; main()", "run", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(), cwd=tmp_path,
    )
    lines = []
    for line in run.stdout:  # output is a pipe: plain lines, one per evaluation round, as they happen
        lines.append(line)
        if line.startswith("round 2/24"):
            run.send_signal(signal.SIGINT)
            break
    output = "".join(lines) + run.stdout.read()
    assert run.wait() == 130, output
    assert "round 2/24  accuracy" in output and "elapsed 0:" in output
    root = tmp_path / "runs" / "tiny"
    done = torch.load(root / "checkpoint.pt", weights_only=True)["rounds_done"]
    assert 2 <= done < 24
    assert _rounds(root / "metrics.jsonl") == list(range(done))  # nothing ahead of the checkpoint
    assert _rounds(root / "diagnostics.jsonl") == list(range(done))
    assert json.loads((root / "ledger.json").read_text())["rounds"] == done
    assert f"holds {done} of 24 rounds, checkpointed" in output
    assert f"resume with: fedpub run {config}" in output
    assert not (root / ".lock").exists()

    resumed = runner.invoke(app, ["run", str(config)])
    assert resumed.exit_code == 0, resumed.output
    assert f"resuming from round {done} of 24" in resumed.output
    assert _rounds(root / "metrics.jsonl") == list(range(24))

    again = runner.invoke(app, ["run", str(config)])
    assert again.exit_code == 0, again.output
    assert "holds this run, finished: nothing to do" in again.output
    final = json.loads((root / "final_metrics.json").read_text())["eval_accuracy"]
    assert f"final test accuracy {final:.4f} after 24 rounds" in again.output and str(root) in again.output
    assert "round " not in again.output  # no empty progress


def test_set_overrides_validated_and_recorded(tiny_emnist_dir, tmp_path):
    config = _config_file(tmp_path, tiny_emnist_dir, rounds=2, eval_every=1)
    result = runner.invoke(app, ["run", str(config), "--set", "strategy.clip_norm=0.25",
                                 "--set", "strategy.sampling.clients_per_round=5", "--set", "name=overridden"])
    assert result.exit_code == 0, result.output
    assert "round 1/2  accuracy" in result.output and "round 2/2  accuracy" in result.output  # not a terminal
    stored = yaml.safe_load((tmp_path / "runs/overridden/config.yaml").read_text())
    assert stored["strategy"]["clip_norm"] == 0.25 and stored["strategy"]["sampling"]["clients_per_round"] == 5

    for bad, expected in (
        ("strategy.clip_nrm=1", "unknown key `strategy.clip_nrm`; allowed keys here: name, clip_norm"),
        ("rounds=many", "field `rounds`"),
        ("rounds.x=1", "`rounds` is a value"),
        ("rounds", "expected KEY=VALUE"),
        ("device=GPU", "field `device`: Value error, not a torch device"),
    ):
        refused = runner.invoke(app, ["run", str(config), "--set", bad, "--set", "name=bad"])
        assert refused.exit_code == 2 and expected in refused.output, (bad, refused.output)
    assert not (tmp_path / "runs/bad").exists()


def test_set_on_a_sweep_applies_to_the_base_under_the_strategies(tiny_emnist_dir, tmp_path):
    (tmp_path / "base.yaml").write_text(dump_config(tiny_config(tiny_emnist_dir, tmp_path / "runs")))
    sweep = {"base": "base.yaml", "epsilons": [4.0], "seeds": [0],
             "strategies": {"plain": {}, "clipped": {"strategy": {"clip_norm": 2.0}}}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    plan = load_sweep(tmp_path / "sweep.yaml", ["strategy.clip_norm=0.3", "rounds=7"])
    assert {r.label: (r.config.strategy.clip_norm, r.config.rounds) for r in plan.runs} == {
        "plain": (0.3, 7), "clipped": (2.0, 7)}
    with pytest.raises(ConfigError, match="unknown key `rnds`"):
        load_sweep(tmp_path / "sweep.yaml", ["rnds=7"])


def test_dry_run_prints_the_plan_and_writes_nothing(tiny_emnist_dir, tmp_path):
    config = _config_file(tmp_path, tiny_emnist_dir, rounds=2)
    result = runner.invoke(app, ["run", str(config), "--dry-run"])
    assert result.exit_code == 0, result.output
    for text in ("would run 2 rounds: N = 16, q = m/N = 0.25, m = 4, z = 0.8, planned (ε, δ) = (",
                 "device cpu", "randomness reproducible", "a new run", "dry run: nothing written"):
        assert text in result.output, result.output
    assert not (tmp_path / "runs").exists()


def test_a_device_this_machine_lacks_is_named_at_build(tiny_emnist_dir, tmp_path):
    config = _config_file(tmp_path, tiny_emnist_dir, rounds=1)
    for device in ("cuda:99", "mps:3"):
        result = runner.invoke(app, ["run", str(config), "--set", f"device={device}"])
        assert result.exit_code == 2 and f"device: {device} was asked for" in result.output, result.output
    result = runner.invoke(app, ["run", str(config), "--set", "device=quantum"])
    assert result.exit_code == 2 and "'quantum' is not a torch device" in result.output
    assert not (tmp_path / "runs").exists()
