"""``flwr run`` on a local simulation, as a Flower user runs the repository: a simulation SuperLink
(``flower-superlink --simulation``), the app from this checkout, ``--federation-config "num-supernodes=N"``,
driven by ``python -m fedpub.simulations.flower.deploy.local --simulation`` (which returns the run's status as its exit code:
``flwr run`` itself exits 0 whether the run completed or failed). 3 users, 2 rounds of DP-FedAvg: about 35 s a
run on 2 busy cores, most of it starting Ray and importing torch in the simulation process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fedpub.simulations.flower.deploy import local
from fedpub.simulations.flower.deploy.local import LocalDeployment
from fedpub.simulations.flower.deploy.processes import VENV_BIN
from tests.simulations.test_deployment import (
    USERS,
    assert_all_stopped,
    check_completed_run,
    three_user_dir,  # noqa: F401  (the fixture)
    write_experiment,
)

pytestmark = [
    pytest.mark.slow,  # real SuperLink and flwr run processes: pytest -m 'not slow' skips them
    pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX-only"),
    pytest.mark.skipif(
        not (VENV_BIN / "flower-superlink").exists(), reason="flower-superlink is not installed next to python"
    ),
]

ROUNDS = 2
RUN_TIMEOUT = 300
"""Two rounds of 3 users take ~35 s; a loaded machine is given room (the run ends on its own long before)."""


def test_flwr_run_on_a_local_simulation_writes_the_run_directory(three_user_dir: Path, tmp_path: Path) -> None:
    config = write_experiment(tmp_path / "exp.yaml", three_user_dir, tmp_path / "runs", rounds=ROUNDS)
    deployment = LocalDeployment(tmp_path / "work", USERS, simulation=True)
    with deployment:
        assert deployment.supernodes == []  # the SuperLink's Simulation Engine holds the nodes
        result = deployment.run(config, timeout=RUN_TIMEOUT, echo=False)
    print(f"local simulation: flwr run {result.wall_time:.1f} s")
    assert result.returncode == 0, result.output[-3000:]
    assert result.status == "finished:completed", result.output[-3000:]
    assert f"Federation `@none/default` ({USERS} simulated SuperNodes)" in result.output
    assert f"fedpub: {USERS} private and 0 public nodes" in result.output
    assert "partially initialized module" not in result.output
    # each Flower line once, no DEBUG (absl's root handler used to repeat them)
    assert "INFO:flwr:" not in result.output and "DEBUG:flwr:" not in result.output, result.output[-3000:]
    assert "Final results" not in result.output  # every round's metrics again: the summary says them once
    check_completed_run(config, rounds=ROUNDS)
    assert_all_stopped(deployment.registry)


@pytest.mark.extended  # ~20 s: -m extended
def test_a_federation_of_the_wrong_size_fails_fast_naming_both_numbers(
    three_user_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_experiment(tmp_path / "exp.yaml", three_user_dir, tmp_path / "runs", rounds=ROUNDS)
    code = local.main(["--simulation", "--config", str(config), "--nodes", "2", "--work-dir", str(tmp_path / "w"),
                       "--timeout", str(RUN_TIMEOUT)])
    out = capsys.readouterr()
    assert code == 1, out.out[-3000:]
    assert f"the simulated federation has 2 SuperNodes, but the experiment 'deploy' has {USERS} users" in out.out
    assert f'--federation-config "num-supernodes={USERS}"' in out.out
    assert "the run did not complete (status finished:failed)" in out.err
    assert not (tmp_path / "runs" / "deploy").exists()
