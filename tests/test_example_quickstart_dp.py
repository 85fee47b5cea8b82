"""The example ``examples/quickstart_dp``, a Flower quickstart-style app (a standard ClientApp with ``lr`` in the
train config, its own model and train function, plus the one line ``answer_discovery``), under ``flwr run`` on a
local simulation SuperLink: fedpub's DP-FedAvg, DOPE with a pool built from the user's train function, and DOPE
with public nodes. Each run completes, its log has no traceback, discovery sends no query the app cannot answer,
and the strategies' lines say what ran (ε, the public users, federated evaluation)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from fedpub.simulations.flower.deploy.flwr_cli import flwr_run
from fedpub.simulations.flower.deploy.local import LocalDeployment
from fedpub.simulations.flower.deploy.processes import VENV_BIN

pytestmark = [
    pytest.mark.slow,  # real SuperLink and flwr run processes: pytest -m 'not slow' skips them
    pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX-only"),
    pytest.mark.skipif(
        not (VENV_BIN / "flower-superlink").exists(), reason="flower-superlink is not installed next to python"
    ),
]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quickstart_dp"
RUN_TIMEOUT = 300


@pytest.fixture(scope="module")
def superlink(tmp_path_factory):
    deployment = LocalDeployment(tmp_path_factory.mktemp("quickstart"), 0, simulation=True)
    with deployment:
        yield deployment


def run_example(deployment: LocalDeployment, strategy: str, nodes: int) -> str:
    result = flwr_run(deployment.registry, None, env=deployment.cli_env, app_dir=EXAMPLE, timeout=RUN_TIMEOUT,
                      log_path=deployment.logs / f"{strategy}.log", echo=False, num_supernodes=nodes,
                      run_config=f"strategy='{strategy}'")
    output = result.output
    print(re.findall(r"quickstart-dp: .*", output))
    assert result.status == "finished:completed", output[-4000:]
    assert "Traceback" not in output and "ERROR" not in output, output[-4000:]
    return output


@pytest.mark.parametrize("strategy, nodes, public", [  # -m extended; the suite runs the Flower guide's snippet below
    pytest.param("dp-fedavg", 4, 0, marks=pytest.mark.extended),
    pytest.param("dope-pool", 4, 0, marks=pytest.mark.extended),
    pytest.param("dope-nodes", 6, 2, marks=pytest.mark.extended),
])
def test_a_quickstart_app_runs_fedpubs_strategies_under_flwr_run_without_a_traceback(superlink, strategy, nodes,
                                                                                     public):
    output = run_example(superlink, strategy, nodes)
    assert f"fedpub: 4 private and {public} public nodes, 0 refused" in output
    assert "user-level ε = " in output
    assert "a Poisson cohort of expected size 3 of 4 private users (its size is private" in output
    assert "'diagnostic/train/train_loss'" in output  # the clients' training metrics, as a diagnostic (simulation)
    if strategy != "dp-fedavg":
        assert "'public_cohort_used': 2.0" in output  # the public users trained every round
    if strategy == "dope-nodes":  # the public nodes ran the app's evaluate handler
        assert "'eval_acc'" in output
    else:
        assert "no federated evaluation" in output and "'eval_acc'" not in output


def guide_server_app() -> str:
    """The Flower guide's own-app ServerApp, verbatim (the code block after its ``own-app-server`` marker in
    docs/guides/flower.md, where the README's Flower route leads)."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "flower.md").read_text()
    block = guide.split("<!-- own-app-server -->", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_flower_guides_own_app_snippet_runs_verbatim_with_the_quickstart_client_app(superlink, tmp_path):
    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__"))
    (app / "quickstart_dp" / "server_app.py").write_text(guide_server_app())
    result = flwr_run(superlink.registry, None, env=superlink.cli_env, app_dir=app, timeout=RUN_TIMEOUT,
                      log_path=superlink.logs / "readme.log", echo=False, num_supernodes=6, run_config="")
    output = result.output
    assert result.status == "finished:completed", output[-4000:]
    assert "Traceback" not in output and "ERROR" not in output, output[-4000:]
    assert "fedpub: 4 private and 2 public nodes, 0 refused" in output
    assert "'public_cohort_used': 2.0" in output and "'eval_acc'" in output
