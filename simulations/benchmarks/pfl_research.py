"""pfl-research's side of the throughput benchmark: client updates per second of DP-FedAvg in Apple's ``pfl``.

pfl-research (Granqvist et al., 2024, "pfl-research: simulation framework for accelerating research in Private
Federated Learning") runs the same work as fedpub: the same model and initial parameters, the same users, and per
round a cohort sampled uniformly with replacement (from a seeded generator), local plain SGD in pfl's own PyTorch
training loop (its minibatches are in data order, unshuffled), per-user L2 clipping and Gaussian noise of std
``noise_multiplier * clip_norm`` on the sum of the clipped updates (pfl's central ``GaussianMechanism``), the noisy
sum divided by the cohort size, then the server's SGD step with learning rate 1. Each round's wall time comes from a
pfl callback; "steady" leaves out the first round, in which pfl also evaluates every cohort user before and after
training (it always evaluates at iteration 0).

pfl 0.6.0 pins ``dp-accounting<0.6`` while fedpub needs ``>=0.6``, so pfl lives in its own virtual environment,
made from the repository root with::

    python -m venv .venv-pfl && .venv-pfl/bin/pip install torch==2.13.0 pfl==0.6.0 h5py pyyaml pydantic \
        && .venv-pfl/bin/pip install --no-deps -e .

Only :mod:`fedpub.models` and :mod:`fedpub.tasks` are imported there (nothing that imports ``dp_accounting``;
the models' dataset registry needs pydantic).
:func:`run_pfl`, called from fedpub's environment, runs the worker ``python -m fedpub.simulations.benchmarks.pfl_research
TASK_FILE`` with that venv's python; the worker prints its figures as JSON on its last stdout line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def _tail(stderr: str | bytes | None) -> str:
    """The end of a worker's stderr (bytes when it was cut off by the timeout, ``None`` when it wrote nothing)."""
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
    return text[-3000:]


def run_pfl(python: str, task_file: Path, timeout_s: float = 1800) -> dict[str, Any]:
    """Run the pfl worker on ``task_file`` (see :func:`main`) with the interpreter ``python``; its JSON figures."""
    command = [python, "-m", "fedpub.simulations.benchmarks.pfl_research", str(task_file)]
    try:
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as error:
        message = f"pfl worker ({python}) ran past {timeout_s} s; stderr tail:\n{_tail(error.stderr)}"
        raise RuntimeError(message) from error
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"pfl worker ({python}) failed (exit {done.returncode}); stderr tail:\n{_tail(done.stderr)}")
    return json.loads(lines[-1])


def main() -> None:
    """Worker (inside pfl's venv): DP-FedAvg on the task file in ``sys.argv[1]``, timed per round."""
    import numpy as np
    import torch
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.hyperparam import NNTrainHyperParams
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel
    from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism
    from pfl.version import __version__

    from fedpub.models import build_model
    from fedpub.tasks import get_task

    class Module(torch.nn.Module):
        """fedpub's model with the ``loss`` and ``metrics`` methods pfl calls on the user's ``(x, y)``."""

        def __init__(self, net: torch.nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
            super().__init__()
            self.net, self.loss_fn = net, loss_fn

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            self.train()
            return self.loss_fn(self(x), y)

        @torch.no_grad()
        def metrics(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, Weighted]:
            self.eval()
            return {"loss": Weighted(self.loss_fn(self(x), y).item() * len(x), len(x))}

    class RoundTimer(TrainingProcessCallback):
        """Wall time of each central iteration, from one ``after_central_iteration`` to the next."""

        def __init__(self) -> None:
            self.round_s: list[float] = []

        def on_train_begin(self, *, model: PyTorchModel) -> Metrics:
            self._start = time.perf_counter()
            return Metrics()

        def after_central_iteration(self, aggregate_metrics: Metrics, model: PyTorchModel, *,
                                    central_iteration: int) -> tuple[bool, Metrics]:
            now = time.perf_counter()
            self.round_s.append(now - self._start)
            self._start = now
            return False, Metrics()

    task = torch.load(sys.argv[1], weights_only=False)
    seeds = np.random.default_rng(task["seed"])
    cohort_rng = np.random.default_rng(seeds.integers(2**32))  # cohorts: uniform with replacement (pfl's "random")
    net = build_model(task["model"], task["num_classes"])
    net.load_state_dict(task["initial_params"])
    module = Module(net, get_task(task["task"]).loss)
    model = PyTorchModel(module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(module.parameters(), lr=1.0))
    users = task["users"]
    population = FederatedDataset(lambda uid: Dataset((users[uid]["x"], users[uid]["y"]), user_id=str(uid)),
                                  lambda: int(cohort_rng.integers(len(users))))
    dp = GaussianMechanism(clipping_bound=task["clip_norm"], relative_noise_stddev=task["noise_multiplier"])
    backend = SimulatedBackend(population, population, postprocessors=[CentrallyAppliedPrivacyMechanism(dp)])
    algorithm = FederatedAveraging()
    # pfl 0.6 takes no generator: its dataset and its algorithm each build a RandomState from numpy's global one,
    # and every seed pfl uses afterwards (users' local seeds, the noise's) is drawn from those two; replacing them
    # with seeded ones repeats the run without seeding a global generator
    population._random_state = np.random.RandomState(seeds.integers(2**32))
    algorithm._random_state = np.random.RandomState(seeds.integers(2**32))
    rounds, cohort, local = task["rounds"], task["cohort"], task["local"]
    timer = RoundTimer()
    algorithm.run(
        NNAlgorithmParams(central_num_iterations=rounds, evaluation_frequency=rounds + 1,
                          train_cohort_size=cohort, val_cohort_size=0),
        backend, model,
        NNTrainHyperParams(local_num_epochs=local["epochs"], local_learning_rate=local["lr"],
                           local_batch_size=local["batch_size"]),
        callbacks=[timer], send_metrics_to_platform=False,
    )
    steady = timer.round_s[1:] or timer.round_s
    steady_round_s = sum(steady) / len(steady)
    print(json.dumps({
        "framework": "pfl-research", "pfl_version": __version__, "round_s": timer.round_s,
        "steady_round_s": steady_round_s, "updates_per_s": cohort / steady_round_s,
        "users_trained": cohort * rounds, "device": next(module.parameters()).device.type,
    }))


if __name__ == "__main__":
    main()
