"""A real deployment whose SuperLink is SIGKILLed mid-run (Issue 8): the run resumes from its last checkpoint with
the same ledger once a SuperLink is started again on the same port with the same ``--database``.

What Flower 1.41 does when its SuperLink dies (checked here): ``flwr run --stream`` exits non-zero at once; the
SuperLink's ``flower-superexec`` exits within a second of its parent's PID going (it polls it; a zombie still counts,
so the killed SuperLink must be reaped, as its shell or service manager would); the ServerApp, whose SuperExec is
gone, stops running rounds and exits once it has given up reporting to the SuperLink or a SuperLink answers again;
the SuperNodes keep retrying the address. A SuperLink started again with the same ``--database`` knows the nodes:
they reconnect by themselves with their node ids, and the killed run is ``finished:failed``. (Its state kept in
memory, the new SuperLink refuses the nodes' heartbeats, 401, and they exit: they would have to be restarted. That
was seen by hand, not tested here.)

About 80 s, so it runs only when asked for (``pytest -m deployment_restart``, as the full TLS run): a deployment
resuming after its ServerApp is killed, which is fedpub's own part of the recovery, runs in every suite
(``test_faults.py``); this test adds Flower's SuperLink restart with the same database around it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from fedpub.config import load_config
from fedpub.simulations.flower.deploy.flwr_cli import list_supernodes, run_status
from fedpub.simulations.flower.deploy.local import LocalDeployment
from fedpub.simulations.flower.deploy.processes import VENV_BIN, marked_pids, pid_alive
from fedpub.simulations.run.run_dir import RunDirectory
from tests.simulations.test_deployment import (  # noqa: F401
    selected,
    assert_all_stopped,
    three_user_dir,
    write_experiment,
)
from tests.simulations.test_faults import (
    DEPLOY_COHORT,
    DEPLOY_NOISE,
    DEPLOY_USERS,
    _client_apps,
    _cmdline,
    _cohorts,
    _ledger,
    _run,
    _wait_until,
    fresh_epsilon,
)

ROUNDS, Q = 2, DEPLOY_COHORT / DEPLOY_USERS

pytestmark = [
    pytest.mark.slow,  # real SuperLink/SuperNode processes: pytest -m 'not slow' skips them
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the Flower processes through /proc (Linux)"),
    pytest.mark.skipif(
        not (VENV_BIN / "flower-superlink").exists(), reason="flower-superlink is not installed next to python"
    ),
]


def _all_online(deployment: LocalDeployment) -> set[int] | None:
    """The node ids of the SuperLink's SuperNodes if there is one per user and all are online."""
    nodes = {int(n["node-id"]): n["status"] for n in list_supernodes(env=deployment.cli_env)}
    return set(nodes) if len(nodes) == DEPLOY_USERS and set(nodes.values()) == {"online"} else None


@pytest.mark.deployment_restart
def test_a_deployment_resumes_after_its_superlink_is_killed(three_user_dir, tmp_path, request):  # noqa: F811
    """Run 1 loses its SuperLink (SIGKILL) while a node trains round 1, after round 0 was checkpointed and released.
    Every other process stops or waits; the run directory keeps round 0. A SuperLink started again on the same port
    with the same database gets the same SuperNodes back, and `flwr run` again resumes from round 0's checkpoint:
    rounds 0 and 1 each released once, a ledger of 2 rounds equal to an uninterrupted run's."""
    if not selected(request.config, "deployment_restart"):
        pytest.skip("a SuperLink killed and restarted mid-run (~80 s); select it with -m deployment_restart")
    config_path = write_experiment(  # reproducible: the test predicts the cohorts from the config
        tmp_path / "exp.yaml", three_user_dir, tmp_path / "runs", rounds=ROUNDS,
        privacy={"randomness": "reproducible", "diagnostics": "on"},
    )
    cfg = load_config(config_path)
    run_dir = RunDirectory(cfg.output_dir / cfg.name)
    assert _cohorts(cfg)[1], "round 1 must sample a user for a ClientApp to be training when the SuperLink dies"
    checkpointed = lambda: (run_dir.load_checkpoint() or {}).get("rounds_done")  # noqa: E731

    started = time.monotonic()
    deployment = LocalDeployment(
        tmp_path / "deploy", num_nodes=DEPLOY_USERS, cwd=tmp_path, database=tmp_path / "deploy" / "superlink.db"
    )
    with deployment:
        marker = deployment.registry.marker
        first: dict = {}
        thread = threading.Thread(target=lambda: first.update(run=deployment.run(config_path, timeout=300, echo=False)))
        thread.start()
        nodes = _wait_until(lambda: _all_online(deployment), 60, "the SuperNodes online")
        _wait_until(lambda: checkpointed() == 1 and run_dir.read_metrics(), 240, "round 0 checkpointed and released")
        busy = _client_apps(marker)
        _wait_until(lambda: _client_apps(marker) - busy, 60, "a ClientApp training round 1")
        link = deployment.superlink
        processes = {p: _cmdline(p) for p in marked_pids(marker)}
        (serverapp,) = [p for p, cmd in processes.items() if "flwr-serverapp" in cmd]
        (link_exec,) = [p for p, cmd in processes.items()
                        if "flower-superexec" in cmd and f"--runtime-api-address {deployment.address}" in cmd]

        os.kill(link.pid, signal.SIGKILL)
        link.popen.wait(10)  # reaped, as by its shell or service manager: its SuperExec polls for its PID to vanish
        killed = time.monotonic()
        thread.join(60)
        assert not thread.is_alive(), "flwr run --stream kept waiting for a dead SuperLink"
        assert first["run"].returncode != 0 and first["run"].run_id is not None
        assert "Connection to the SuperLink is unavailable" in first["run"].output, first["run"].output[-2000:]
        _wait_until(lambda: not pid_alive(link_exec), 30, "the dead SuperLink's SuperExec to exit")
        assert all(node.alive() for node in deployment.supernodes), "a SuperNode exited instead of retrying"
        # the run directory as the kill left it: round 0 checkpointed and released, round 1 nowhere
        assert checkpointed() == 1
        (round_zero,) = run_dir.read_metrics()
        assert round_zero["round"] == 0
        assert json.loads(json.dumps(run_dir.load_checkpoint()["record"]["metrics"])) == round_zero
        ledger = json.loads(run_dir.ledger_path.read_text())
        assert ledger["rounds"] == 1
        assert ledger["epsilon"] == pytest.approx(fresh_epsilon(Q, DEPLOY_NOISE, 1), rel=1e-6)
        assert not list(run_dir.root.glob(".*.tmp")), "a half-written file was left"

        deployment.launch_superlink()  # same port, same database; the SuperNodes come back by themselves
        print(f"SuperLink restarted {time.monotonic() - killed:.1f} s after the kill")
        second = deployment.run(config_path, timeout=300, echo=False)
        _wait_until(lambda: not pid_alive(serverapp), 60, "run 1's ServerApp to exit")
        assert _all_online(deployment) == nodes  # the same nodes (ids), online again, never restarted
        assert all(node.alive() for node in deployment.supernodes)
        # run 1 is failed when its ServerApp reports its exit to the new SuperLink, or its task token expires
        failed = lambda: run_status(first["run"].run_id, env=deployment.cli_env) == "finished:failed"  # noqa: E731
        _wait_until(failed, 90, "run 1 marked finished:failed")
    print(f"deployment with a killed SuperLink: {time.monotonic() - started:.1f} s")

    assert second.status == "finished:completed", second.output[-3000:]
    records = run_dir.read_metrics()
    assert [r["round"] for r in records] == list(range(ROUNDS))  # round 1 redone from the checkpoint, counted once
    assert records[0] == round_zero and "first round 1" in second.output  # resumed, not started over
    diagnostics = run_dir.read_diagnostics()
    assert [(r["cohort_sampled"], r["cohort_failed"]) for r in diagnostics] == [(len(c), 0) for c in _cohorts(cfg)]
    assert run_dir.load_checkpoint()["rounds_done"] == ROUNDS
    ledger = json.loads(run_dir.ledger_path.read_text())
    assert ledger["rounds"] == ROUNDS
    epsilon = fresh_epsilon(Q, DEPLOY_NOISE, ROUNDS)
    assert ledger["epsilon"] == pytest.approx(epsilon, rel=1e-6)
    assert records[-1]["epsilon"] == pytest.approx(epsilon, rel=1e-6)
    clean = cfg.model_copy(update={"output_dir": tmp_path / "clean"})
    _run(clean)
    assert ledger == _ledger(clean)  # the ledger of an uninterrupted run
    assert_all_stopped(deployment.registry)
