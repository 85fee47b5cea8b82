"""Fault tolerance (docs/design.md §3): a failed, late or malformed reply contributes nothing while the round's noise
and DP event stay those of the sampled cohort, and a killed process resumes from its checkpoint with the same
ledger.

Faults are injected as ``tests/simulations/faults.py`` describes. Each test compares the faulty run with a
fault-free run of the same config (its ``ledger.json``) and with dp-accounting computed afresh.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dp_accounting
import pytest
import torch

from fedpub.clients.cohort_training import CohortTrainer
from fedpub.clients.local_training import ClientFailure, LocalTrainingConfig
from fedpub.config import dump_config, load_config
from fedpub.data.base import ClientData
from fedpub.models import build_model
from fedpub.models.seeded import model_params
from fedpub.tasks import CLASSIFICATION
from fedpub.simulations.flower.deploy.flwr_cli import REPO_ROOT, flwr_cli
from fedpub.simulations.flower.deploy.local import LocalDeployment
from fedpub.simulations.flower.deploy.processes import VENV_BIN, marked_pids
from fedpub.simulations.run.engine import CohortsKeepFailing, run_in_process
from fedpub.simulations.run.experiment import build_experiment
from fedpub.simulations.run.run_dir import RunDirectory
from tests.conftest import tiny_config
from tests.simulations.faults import CORRUPTIONS, FaultPlan, InProcessFaults, faulty_client_app
from tests.simulations.test_deployment import (  # noqa: F401  (three_user_dir: the fixture)
    assert_all_stopped,
    selected,
    three_user_dir,
    write_experiment,
)

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them

CLIP, NOISE, COHORT, USERS, DELTA = 0.5, 0.8, 8, 16, 1e-5
NOISE_STD = NOISE * CLIP / COHORT  # z·C/m, m the expected cohort of the population, whoever replies
TIMEOUT = 4.0  # client.timeout_s: a tiny user trains in milliseconds even on a loaded machine; a `hang` user for a minute


def _config(data_dir: Path, out_dir: Path, **overrides):
    return tiny_config(
        data_dir, out_dir, strategy={"sampling": {"kind": "poisson", "clients_per_round": COHORT}}, **overrides
    )


def _run(cfg, experiment=None, **kwargs):
    experiment = experiment or build_experiment(cfg)
    return run_in_process(experiment, RunDirectory(cfg.output_dir / cfg.name), **kwargs)


def _records(cfg) -> list[dict]:
    return RunDirectory(cfg.output_dir / cfg.name).read_metrics()


def _diagnostics(cfg) -> list[dict]:
    return RunDirectory(cfg.output_dir / cfg.name).read_diagnostics()


def _ledger(cfg) -> dict:
    return json.loads((cfg.output_dir / cfg.name / "ledger.json").read_text())


def fresh_epsilon(q: float, z: float, rounds: int, delta: float = DELTA) -> float:
    """ε of ``rounds`` Poisson-sampled Gaussian rounds, from dp-accounting directly."""
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), rounds)
    return accountant.get_epsilon(delta)


def _cohorts(cfg) -> list[list[str]]:
    experiment = build_experiment(cfg)
    return [experiment.strategy.sample_cohort(experiment.private_ids, t) for t in range(cfg.rounds)]


def assert_mechanism_unchanged(cfg, clean_cfg, failed: list[int]) -> None:
    """Rounds complete once each, ``failed[t]`` users counted failed in round t, every round's noise z·C/m with m
    from the population, and the ledger equal to the fault-free run's and to dp-accounting's."""
    records = _records(cfg)
    assert [r["round"] for r in records] == list(range(cfg.rounds))  # no round lost, none counted twice
    assert [r["cohort_failed"] for r in _diagnostics(cfg)] == failed
    assert [r["cohort_sampled"] for r in _diagnostics(cfg)] == [len(c) for c in _cohorts(cfg)]
    for r in records:
        assert r["aggregate/expected_cohort"] == COHORT
        assert r["noise/noise_std"] == pytest.approx(NOISE_STD)
    ledger = _ledger(cfg)
    assert ledger == _ledger(clean_cfg)
    assert ledger["rounds"] == cfg.rounds
    assert ledger["epsilon"] == pytest.approx(fresh_epsilon(COHORT / USERS, NOISE, cfg.rounds), rel=1e-6)


# -- failed replies, in process -----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["vectorised", "loop"])
def test_in_process_failed_users_contribute_nothing_and_leave_noise_and_ledger_unchanged(
    tiny_emnist_dir, tmp_path, monkeypatch, path
):
    client = {"path": path, "vectorise_min_users": 1, "timeout_s": TIMEOUT}
    clean = _config(tiny_emnist_dir, tmp_path / "clean", client=client)
    faulty = _config(tiny_emnist_dir, tmp_path / "faulty", client=client)
    _run(clean)
    cohorts = _cohorts(faulty)
    assert [len(c) for c in cohorts] == [8, 10, 7]
    # round 0: every user fails, each way there is (raise first and last: the vectorised groups holding them are
    # trained again user by user); round 1: three of ten, one of them past client.timeout_s; round 2: none
    kinds = ["raise", *CORRUPTIONS, "nan", "raise"]
    plan = FaultPlan({**{(0, cid): kind for cid, kind in zip(cohorts[0], kinds, strict=True)},
                      (1, cohorts[1][0]): "raise", (1, cohorts[1][4]): "shape", (1, cohorts[1][6]): "hang"})
    injector = InProcessFaults(plan, monkeypatch)
    experiment = injector.experiment(build_experiment(faulty))
    initial = model_params(experiment.new_model())
    after = []
    lines: list[str] = []

    def on_round(record):
        injector.on_round(record)
        after.append(torch.load(faulty.output_dir / faulty.name / "checkpoint.pt", weights_only=True)["params"])

    result = _run(faulty, experiment, on_round=on_round, log=lines.append)

    assert result.rounds_done == 3
    assert_mechanism_unchanged(faulty, clean, failed=[8.0, 3.0, 0.0])
    # round 0 released nothing but the noise: w_1 - w_0 = N(0, (zC)^2 I) / m, whose std is z·C/m (not z·C/survivors)
    noise = torch.cat([(after[0][k] - initial[k]).flatten() for k in initial])
    assert noise.numel() > 5000
    assert float(noise.mean()) == pytest.approx(0.0, abs=4 * NOISE_STD / noise.numel() ** 0.5)
    assert float(noise.std()) == pytest.approx(NOISE_STD, rel=0.05)
    # the error of each failed training is logged once, in one line per round
    failures = [line for line in lines if "failed and contribute nothing" in line]
    assert len(failures) == 2
    assert failures[0].startswith("round 0: 2 of 8 private users failed") and "RuntimeError" in failures[0]
    assert failures[1].startswith("round 1: 2 of 10 private users failed")
    # the slow user was stopped at the deadline, long before its thousands of local steps were done
    stopped = re.search(r"ClientTimeout: local training passed client.timeout_s = \S+ s \(\S+ s, (\d+) of (\d+) local", failures[1])
    assert stopped is not None and int(stopped[1]) < int(stopped[2]) // 2, failures[1]


def test_a_vectorised_group_that_raises_is_trained_again_user_by_user_from_the_same_generator_states():
    g = torch.Generator().manual_seed(0)
    users = [ClientData(torch.rand(8, 1, 28, 28, generator=g), torch.randint(10, (8,), generator=g)) for _ in range(3)]
    broken = ClientData(torch.rand(8, 1, 5, 5, generator=g), torch.randint(10, (8,), generator=g))  # the model raises
    model = build_model("emnist_small_cnn", 10)
    trainer = CohortTrainer(model, LocalTrainingConfig(batch_size=4), CLASSIFICATION, path="vectorised")
    assert trainer.mode == "vectorised"
    seeded = lambda *seeds: [torch.Generator().manual_seed(s) for s in seeds]  # noqa: E731
    clean = trainer.train(model_params(model), users, seeded(10, 11, 12))
    faulty = trainer.train(model_params(model), [users[0], broken, *users[1:]], seeded(10, 99, 11, 12))
    assert isinstance(faulty[1], ClientFailure) and faulty[1].error.startswith("RuntimeError: ")
    for a, b in zip(clean, [faulty[0], *faulty[2:]], strict=True):  # one group (same step count), all retrained
        for name in a.update:
            torch.testing.assert_close(b.update[name], a.update[name], rtol=1e-4, atol=1e-6)


def test_failed_public_users_only_thin_the_public_statistics_and_cost_no_privacy(tiny_emnist_dir, tmp_path, monkeypatch):
    dope = {"name": "dope", "public_clients_per_round": 2, "sampling": {"kind": "poisson", "clients_per_round": 4}}
    make = lambda where: tiny_config(  # noqa: E731 (4 of the 16 writers public: N = 12)
        tiny_emnist_dir, tmp_path / where, data={"public": {"fraction": 0.25, "seed": 0}}, strategy=dope
    )
    cfg, clean = make("faulty"), make("clean")
    _run(clean)
    experiment = build_experiment(cfg)
    public = [experiment.strategy.sample_public_cohort(experiment.public_ids, t) for t in range(cfg.rounds)]
    # round 0: one of the two public users fails, round 1: both (DOPE recenters on nothing), round 2: none
    plan = FaultPlan({(0, public[0][1]): "raise", (1, public[1][0]): "raise", (1, public[1][1]): "nan"})
    injector = InProcessFaults(plan, monkeypatch)
    lines: list[str] = []
    result = _run(cfg, injector.experiment(experiment), on_round=injector.on_round, log=lines.append)
    assert result.rounds_done == cfg.rounds
    records = _records(cfg)
    assert [r["public_cohort_used"] for r in records] == [1.0, 0.0, 2.0]
    assert [r["cohort_failed"] for r in _diagnostics(cfg)] == [0.0, 0.0, 0.0]
    assert _ledger(cfg) == _ledger(clean)  # public users are outside the accounting, failed or not
    assert [line.split(":")[0] for line in lines if "public users failed" in line] == ["round 0", "round 1"]


def test_a_run_whose_every_user_keeps_failing_stops_checkpointed_and_resumes_once_fixed(
    tiny_emnist_dir, tmp_path, monkeypatch
):
    cfg = _config(tiny_emnist_dir, tmp_path / "broken", rounds=5, stop_after_failed_rounds=2, checkpoint_every=5)
    clean = _config(tiny_emnist_dir, tmp_path / "clean", rounds=5, stop_after_failed_rounds=2, checkpoint_every=5)
    cohorts = _cohorts(cfg)
    # rounds 0 and 2: every user fails, round 1 one survivor (the streak starts again), rounds 3 and 4: every user
    everyone = lambda t: {(t, cid): "raise" for cid in cohorts[t]}  # noqa: E731
    plan = FaultPlan({**everyone(0), **{(1, cid): "raise" for cid in cohorts[1][1:]}, **everyone(2), **everyone(3),
                      **everyone(4)})
    injector = InProcessFaults(plan, monkeypatch)
    with pytest.raises(CohortsKeepFailing, match="every sampled user failed in rounds 2 to 3.*run the same config again"):
        _run(cfg, injector.experiment(build_experiment(cfg)), on_round=injector.on_round, log=lambda _: None)
    checkpoint = RunDirectory(cfg.output_dir / cfg.name).load_checkpoint()
    assert checkpoint["rounds_done"] == 4  # checkpointed at the stop, between the checkpoint_every rounds
    assert [r["cohort_failed"] == r["cohort_sampled"] for r in _diagnostics(cfg)] == [True, False, True, True]
    assert _ledger(cfg)["rounds"] == 4  # the four released rounds, no more

    monkeypatch.undo()  # the client is fixed: the rerun resumes at round 4 and ends with the fault-free ledger
    result = _run(cfg)
    _run(clean)
    assert result.rounds_done == 5 and [r["round"] for r in _records(cfg)] == list(range(5))
    assert _ledger(cfg) == _ledger(clean)


# -- failed, late and malformed replies in Flower simulation ------------------------------------------------------
ROUND_TIMEOUT = 30.0  # healthy replies arrive within it even on a busy machine; a `hang` reply 5 s after it
FLOWER = {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 180, "round_timeout": ROUND_TIMEOUT}


@pytest.mark.extended  # the in-process fault tests and the standard clients' malformed replies stay in the suite
def test_flower_simulation_failed_late_and_malformed_replies_contribute_nothing(tiny_emnist_dir, tmp_path, monkeypatch):
    from flwr.simulation import run_simulation

    from fedpub.simulations.flower.server_app import make_server_app

    make = lambda where: _config(tiny_emnist_dir, tmp_path / where, rounds=2, flower=FLOWER)  # noqa: E731
    cfg = make("flower")
    cohorts = _cohorts(cfg)
    kinds = ["raise", "hang", "nan", "inf", "shape", "keys"]  # 6 of round 0's 8 users; 2 of round 1's 9
    plan = FaultPlan({**{(0, cid): kind for cid, kind in zip(cohorts[0][: len(kinds)], kinds, strict=True)},
                      (1, cohorts[1][1]): "dtype", (1, cohorts[1][7]): "malformed"})
    results = []
    started = time.monotonic()
    run_simulation(
        server_app=make_server_app(cfg, results=results),
        client_app=faulty_client_app(cfg, plan, hang_seconds=ROUND_TIMEOUT + 5),
        num_supernodes=USERS,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
    )
    print(f"Flower simulation with faults: {time.monotonic() - started:.1f} s")
    (result,) = results
    assert result.rounds_done == 2

    clean = make("clean")
    _run(clean)
    assert_mechanism_unchanged(cfg, clean, failed=[6.0, 2.0])
    # the same model as in process when those eight users fail there: the late and malformed replies were dropped
    # whole, and the survivors' sum was divided by m and noised as in a fault-free round
    same_failures = make("inprocess_failures")
    injector = InProcessFaults(FaultPlan({key: "raise" for key in plan.faults}), monkeypatch)
    local = _run(same_failures, injector.experiment(build_experiment(same_failures)), on_round=injector.on_round)
    for k in local.params:
        torch.testing.assert_close(result.params[k], local.params[k], rtol=1e-5, atol=1e-6)


# -- a run killed at any point resumes from its checkpoint ------------------------------------------------------
def _kill_at(config_path: Path, point: str, round_index: int) -> None:
    """Run the config in a subprocess that SIGKILLs itself at ``point`` of round ``round_index``."""
    threads = str(torch.get_num_threads())  # the parent's: the resumed model is compared bit for bit
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    child = subprocess.run(
        [sys.executable, "-m", "tests.simulations.faults", str(config_path), point, str(round_index)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]


def test_a_run_killed_at_any_point_resumes_with_the_uninterrupted_model_and_ledger(tiny_emnist_dir, tmp_path):
    make = lambda where: _config(tiny_emnist_dir, tmp_path / where, rounds=4, eval_every=4)  # noqa: E731
    whole = _run(make("whole"))
    cfg = make("killed")
    config_path = tmp_path / "killed.yaml"
    config_path.write_text(dump_config(cfg))
    run_dir = RunDirectory(cfg.output_dir / cfg.name)

    def state() -> tuple[int, list[int], int]:
        """(rounds in the checkpoint, rounds in metrics.jsonl, rounds in ledger.json)"""
        return (run_dir.load_checkpoint()["rounds_done"], [r["round"] for r in run_dir.read_metrics()],
                _ledger(cfg)["rounds"])

    # each kill leaves a checkpoint that loads; a ledger never counts fewer rounds than the checkpoint holds
    _kill_at(config_path, "round_end", 1)  # after round 1's checkpoint
    assert state() == (2, [0, 1], 2)
    _kill_at(config_path, "training", 2)  # while round 2's cohort trains
    assert state() == (2, [0, 1], 2)
    _kill_at(config_path, "after_metrics", 2)  # round 2 recorded, not checkpointed: it is run again
    assert state() == (2, [0, 1, 2], 2)
    _kill_at(config_path, "writing_checkpoint", 2)  # halfway through round 2's checkpoint
    assert state() == (2, [0, 1, 2], 3)  # the previous checkpoint; the ledger already counts round 2
    assert {p.name for p in run_dir.root.glob(".checkpoint.pt.*.tmp")}, "the half-written checkpoint is not there"

    resumed = _run(cfg)
    assert resumed.rounds_done == 4
    for k in whole.params:
        assert torch.equal(resumed.params[k], whole.params[k]), k
    assert [r["round"] for r in run_dir.read_metrics()] == [0, 1, 2, 3]
    assert list(run_dir.root.glob(".*.tmp")) == []  # the resumed run removed the killed writer's temporary file
    assert _ledger(cfg) == _ledger(make("whole"))
    assert _ledger(cfg)["rounds"] == 4
    assert resumed.epsilon == pytest.approx(fresh_epsilon(COHORT / USERS, NOISE, 4), rel=1e-6)


def test_a_checkpoint_write_that_fails_halfway_leaves_the_previous_one_and_a_cut_metrics_line_is_dropped(
    tiny_emnist_dir, tmp_path, monkeypatch
):
    cfg = _config(tiny_emnist_dir, tmp_path, rounds=1)
    _run(cfg)
    run_dir = RunDirectory(cfg.output_dir / cfg.name)
    before = run_dir.checkpoint_path.read_bytes()

    def half_then_raise(obj, f, *args, **kwargs):
        Path(f).write_bytes(before[: len(before) // 2])
        raise OSError("disk full")

    monkeypatch.setattr("fedpub.simulations.run.run_dir.torch.save", half_then_raise)
    with pytest.raises(OSError, match="disk full"):
        run_dir.save_checkpoint({"rounds_done": 99})
    assert run_dir.checkpoint_path.read_bytes() == before
    assert run_dir.load_checkpoint()["rounds_done"] == 1
    assert list(run_dir.root.glob(".*.tmp")) == []  # the temporary file is removed
    monkeypatch.undo()

    with run_dir.metrics_path.open("a") as f:
        f.write('{"round": 1, "epsil')  # a process died while appending a record
    assert [r["round"] for r in run_dir.read_metrics()] == [0]
    _run(cfg)  # resuming the finished run rewrites its files
    assert run_dir.metrics_path.read_text().count("\n") == 1 and run_dir.read_metrics()[0]["round"] == 0


# -- a real deployment: the ServerApp and a SuperNode killed mid-round --------------------------------------------
DEPLOY_USERS, DEPLOY_COHORT, DEPLOY_NOISE, DEPLOY_ROUND_TIMEOUT = 3, 2, 1.0, 20.0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _client_apps(marker: str, node_pid: int | None = None) -> set[int]:
    """The running ``flwr-clientapp`` processes of a deployment (of the SuperNode ``node_pid`` only: its process
    group, where its SuperExec starts them)."""
    def in_group(pid: int) -> bool:
        try:
            return node_pid is None or os.getpgid(pid) == node_pid
        except ProcessLookupError:
            return False

    return {p for p in marked_pids(marker) if "flwr-clientapp" in _cmdline(p) and in_group(p)}


def _wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the Flower processes through /proc (Linux)")
@pytest.mark.skipif(not (VENV_BIN / "flower-superlink").exists(), reason="flower-superlink is not installed next to python")
@pytest.mark.deployment_restart
def test_a_deployment_resumes_after_its_serverapp_is_killed_and_survives_a_killed_supernode(
    three_user_dir, tmp_path, request  # noqa: F811
):
    """Run 1 loses its ServerApp (SIGKILL) while a node trains round 1; `flwr run` again resumes from the checkpoint
    of round 0; in round 2 the SuperNode of the round's only user is SIGKILLed while it trains, so the round closes at
    ``flower.round_timeout`` with nothing from it. The run completes with every round accounted once. About 100 s
    (two deployments and a round timeout), so it runs only when asked for, with the SuperLink restart:
    ``pytest -m deployment_restart``. The same resume from a checkpoint is checked in process on every run
    (``test_a_run_killed_at_any_point_resumes_with_the_uninterrupted_model_and_ledger``)."""
    import yaml

    if not selected(request.config, "deployment_restart"):
        pytest.skip("a deployment whose ServerApp and a SuperNode are killed (~100 s); select it with "
                    "-m deployment_restart")

    config_path = write_experiment(  # reproducible: the test predicts the cohorts from the config
        tmp_path / "exp.yaml", three_user_dir, tmp_path / "runs", rounds=3,
        privacy={"randomness": "reproducible", "diagnostics": "on"},
    )
    raw = yaml.safe_load(config_path.read_text())
    raw["flower"]["round_timeout"] = DEPLOY_ROUND_TIMEOUT
    raw["seed"] = 158  # its cohorts are one user each round, f0000_00 in round 2
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    cfg = load_config(config_path)
    run_dir = RunDirectory(cfg.output_dir / cfg.name)
    cohorts = _cohorts(cfg)
    assert cohorts[2] == ["f0000_00"], cohorts  # node 0 holds the 0th user (partition-id=0)

    started = time.monotonic()
    deployment = LocalDeployment(tmp_path / "deploy", num_nodes=DEPLOY_USERS, cwd=tmp_path)
    with deployment:
        marker = deployment.registry.marker
        first: dict = {}
        thread = threading.Thread(target=lambda: first.update(run=deployment.run(config_path, timeout=300, echo=False)))
        thread.start()
        checkpointed = lambda: (run_dir.load_checkpoint() or {}).get("rounds_done")  # noqa: E731
        _wait_until(lambda: checkpointed() == 1, 240, "round 0's checkpoint")
        busy = _client_apps(marker)
        _wait_until(lambda: _client_apps(marker) - busy, 60, "a ClientApp training round 1")
        (serverapp,) = [p for p in marked_pids(marker) if "flwr-serverapp" in _cmdline(p)]
        os.kill(serverapp, signal.SIGKILL)  # the process that holds the run's state, while round 1 trains
        run_cli = next(p for p in deployment.registry.processes if p.name == "flwr-run")
        os.killpg(run_cli.pid, signal.SIGTERM)  # stop watching run 1: its status follows on the SuperLink's time
        thread.join(30)
        assert not thread.is_alive() and first["run"].run_id is not None
        flwr_cli(["stop", str(first["run"].run_id), "fedpub-local"], env=deployment.cli_env)
        assert checkpointed() == 1
        (round_zero,) = run_dir.read_metrics()

        node = deployment.supernodes[0]
        second: dict = {}
        thread = threading.Thread(target=lambda: second.update(run=deployment.run(config_path, timeout=300, echo=False)))
        thread.start()
        _wait_until(lambda: checkpointed() == 2, 240, "round 1 of the resumed run")
        busy = _client_apps(marker)
        _wait_until(lambda: _client_apps(marker, node.pid) - busy, 60, "node 0's ClientApp training round 2")
        os.killpg(node.pid, signal.SIGKILL)  # the SuperNode, its SuperExec and the ClientApp training
        thread.join(300)
        result = second["run"]
    print(f"deployment with a killed ServerApp and SuperNode: {time.monotonic() - started:.1f} s")

    assert result.status == "finished:completed", result.output[-3000:]
    assert first["run"].status != "finished:completed"
    records = run_dir.read_metrics()
    assert [r["round"] for r in records] == [0, 1, 2]  # round 1 was redone from the checkpoint, counted once
    assert records[0] == round_zero  # resumed, not started over
    assert [(r["cohort_sampled"], r["cohort_failed"]) for r in run_dir.read_diagnostics()] == [(1, 0), (1, 0), (1, 1)]
    assert all(r["noise/noise_std"] == pytest.approx(DEPLOY_NOISE * 0.5 / DEPLOY_COHORT) for r in records)
    assert run_dir.load_checkpoint()["rounds_done"] == 3
    ledger = json.loads(run_dir.ledger_path.read_text())
    assert ledger["rounds"] == 3
    assert ledger["epsilon"] == pytest.approx(fresh_epsilon(DEPLOY_COHORT / DEPLOY_USERS, DEPLOY_NOISE, 3), rel=1e-6)
    clean = cfg.model_copy(update={"output_dir": tmp_path / "clean"})
    _run(clean)
    assert ledger == _ledger(clean)
    assert_all_stopped(deployment.registry)


# -- the Flower backends release a round only once it is checkpointed ----------------------------------------
def test_flower_releases_a_round_only_after_its_checkpoint_so_a_resume_never_redoes_a_released_round(
    tiny_emnist_dir, tmp_path, monkeypatch
):
    """A redone round reuses its noise; on Flower its surviving users may differ, and two releases with the same
    noise would leak their difference. So the ServerApp checkpoints each round before writing its record: killed
    in between, the resumed run writes the checkpointed record and goes on with the next round."""
    from fedpub.simulations.flower.simulation import run_flower_simulation

    cfg = _config(tiny_emnist_dir, tmp_path, rounds=3, checkpoint_every=3, flower=FLOWER)
    run_dir = RunDirectory(cfg.output_dir / cfg.name)
    released = RunDirectory.append_metrics

    def killed_before_releasing_round_1(self, record):
        if record["round"] == 1:
            raise KeyboardInterrupt("killed between round 1's checkpoint and its release")
        released(self, record)

    monkeypatch.setattr(RunDirectory, "append_metrics", killed_before_releasing_round_1)
    with pytest.raises((KeyboardInterrupt, RuntimeError)):
        run_flower_simulation(cfg, USERS)
    checkpoint = run_dir.load_checkpoint()
    assert checkpoint["rounds_done"] == 2 and [r["round"] for r in run_dir.read_metrics()] == [0]
    unreleased = checkpoint["record"]["metrics"]

    monkeypatch.setattr(RunDirectory, "append_metrics", released)
    result = run_flower_simulation(cfg, USERS)
    records = run_dir.read_metrics()
    assert result.rounds_done == 3 and [r["round"] for r in records] == [0, 1, 2]
    assert records[1] == json.loads(json.dumps(unreleased))  # round 1 as it was checkpointed, not run again
    assert _ledger(cfg)["rounds"] == 3
    assert result.epsilon == pytest.approx(fresh_epsilon(COHORT / USERS, NOISE, 3), rel=1e-6)
