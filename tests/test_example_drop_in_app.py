"""The example Flower App ``examples/drop_in`` (a user's own ServerApp and ClientApp around fedpub's strategy)
runs in Flower simulation (real Flower, real Ray) with its default run config: 4 private and 2 public SuperNodes,
DOPE-SGD for 3 rounds. The example is run as it is; the test only swaps the strategy class its ServerApp builds
for a subclass that records what happened."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from fedpub.privacy.accountant import epsilon_for
from fedpub.privacy.events import PoissonSampling
from fedpub.simulations.flower.environment import offline_flower_environment
from fedpub.strategies.flower import FedpubStrategy

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drop_in"
BACKEND = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}}


class RecordingStrategy(FedpubStrategy):
    """FedpubStrategy that keeps each released round's outcome, ``start``'s arguments, result or exception."""

    built: list[RecordingStrategy] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rounds: list[tuple[int, object, int]] = []
        self.on_round = lambda t, outcome, client_metrics, examples: self.rounds.append((t, outcome, examples))
        self.initial = self.result = self.error = None
        RecordingStrategy.built.append(self)

    def start(self, grid, initial_arrays, *args, **kwargs):
        self.initial = {k: v.clone() for k, v in initial_arrays.to_torch_state_dict().items()}
        try:
            self.result = super().start(grid, initial_arrays, *args, **kwargs)
        except BaseException as error:
            self.error = error
            raise
        return self.result


@pytest.fixture
def example_apps(monkeypatch):
    """The example's apps (Ray's workers get the driver's sys.path), the ServerApp building the recording strategy."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from drop_in_app import client_app, server_app, task

    monkeypatch.setattr(server_app, "FedpubStrategy", RecordingStrategy)
    RecordingStrategy.built = []
    yield server_app, client_app, task
    for name in [m for m in sys.modules if m == "drop_in_app" or m.startswith("drop_in_app.")]:
        del sys.modules[name]


def test_the_example_app_runs_dope_with_public_nodes_in_flower_simulation(example_apps):
    server_app, client_app, task = example_apps
    config = task.DEFAULT_CONFIG
    population, num_public, rounds = config["population"], config["num-public"], config["num-rounds"]
    offline_flower_environment()
    from flwr.simulation import run_simulation

    run_simulation(
        server_app=server_app.app, client_app=client_app.app, num_supernodes=population + num_public,
        backend_config=BACKEND,
    )

    assert len(RecordingStrategy.built) == 1
    strategy = RecordingStrategy.built[0]
    assert strategy.error is None, strategy.error
    assert strategy.result is not None, "the ServerApp did not finish; see the log above"
    # the nodes declared their users: partition-id < population private, the others public
    assert sorted(strategy.nodes.private) == [f"user-{i}" for i in range(population)]
    assert sorted(strategy.nodes.public) == [f"user-{i}" for i in range(population, population + num_public)]

    assert [t for t, _, _ in strategy.rounds] == list(range(rounds))
    final = strategy.result.arrays.to_torch_state_dict()
    assert final.keys() == strategy.initial.keys()
    assert any(not torch.equal(final[k], strategy.initial[k]) for k in final)  # the model moved
    for t, outcome, examples in strategy.rounds:
        metrics = outcome.metrics
        assert metrics["public_cohort_used"] == config["public-clients-per-round"] == 2  # the public nodes trained
        assert metrics["recenter/center_norm"] > 0  # ... and recentered the clip
        assert outcome.diagnostics["cohort_failed"] == 0
        assert (examples > 0) == (outcome.diagnostics["cohort_sampled"] > 0)  # the private replies' num-examples came back
    for t in range(1, rounds + 1):
        assert strategy.result.train_metrics_clientapp[t]["public_cohort_used"] == 2

    q = config["clients-per-round"] / population
    expected = epsilon_for(PoissonSampling(q), config["noise-multiplier"], rounds, config["delta"])
    assert strategy.epsilon() == pytest.approx(expected, rel=1e-9)
    assert strategy.result.train_metrics_clientapp[rounds]["epsilon"] == pytest.approx(expected, rel=1e-6)
    assert not strategy.stopped_by_budget


def test_the_example_is_a_valid_flower_app_whose_code_defaults_are_its_run_config(example_apps):
    """``flwr run`` accepts the pyproject.toml, and run_simulation (an empty run config) runs its defaults."""
    from flwr.cli.config_utils import load_and_validate

    _, _, task = example_apps
    config, warnings = load_and_validate(EXAMPLE / "pyproject.toml")
    assert config is not None and warnings == []
    app = config["tool"]["flwr"]["app"]
    assert app["components"] == {"serverapp": "drop_in_app.server_app:app", "clientapp": "drop_in_app.client_app:app"}
    assert app["config"] == task.DEFAULT_CONFIG
    assert config["project"]["dependencies"] == ["fedpub"]
