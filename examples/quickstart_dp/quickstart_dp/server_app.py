"""The ServerApp (quickstart pattern) with the strategy the run config names: Flower's ``FedAvg`` (no DP), or
fedpub's DP-FedAvg or DOPE-SGD (user-level DP; DOPE's public users either held by the server, trained with the
user's own ``train`` function, or on their own SuperNodes). The strategies take the same ``start`` call."""

from __future__ import annotations

import time
from functools import partial
from logging import INFO

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fedpub.strategies.flower import FedpubStrategy, TrainFnPool
from quickstart_dp.task import Net, load_data, test, train

app = ServerApp()

DP = {"clip_norm": 1.0, "noise_multiplier": 1.0, "sampling": {"kind": "poisson", "clients_per_round": 3}}
"""fedpub's strategy section: C = 1, z = 1, a Poisson cohort of expected size 3."""


def train_weights(weights: dict[str, torch.Tensor], trainloader, *, epochs: int, lr: float) -> dict:
    """The server-held public users' training: the user's own ``train`` from ``weights``; the new weights."""
    model = Net()
    model.load_state_dict(weights)
    train(model, trainloader, epochs, lr, torch.device("cpu"))
    return model.state_dict()


class CentralEvaluation:
    """``start``'s ``evaluate_fn``: the global model on test data the server holds (a user the federation does not
    have), with the wall time of the round that produced it."""

    def __init__(self, partition_id: int, batch_size: int) -> None:
        self.testloader = load_data(partition_id, batch_size)[1]
        self.last = time.monotonic()

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord:
        now = time.monotonic()
        seconds, self.last = now - self.last, now
        model = Net()
        model.load_state_dict(arrays.to_torch_state_dict())
        loss, accuracy = test(model, self.testloader, torch.device("cpu"))
        return MetricRecord({"loss": loss, "accuracy": accuracy, "round_seconds": seconds})


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    name, rounds, lr = str(cfg["strategy"]), int(cfg["num-server-rounds"]), float(cfg["learning-rate"])
    private, public = int(cfg["num-private"]), int(cfg["num-public"])
    dope = {**DP, "name": "dope", "public_clients_per_round": public}
    if name == "fedavg":
        strategy = FedAvg(fraction_evaluate=float(cfg["fraction-evaluate"]), min_available_nodes=private)
    elif name == "dp-fedavg":
        strategy = FedpubStrategy.from_config({**DP, "name": "dp_fedavg"}, population=private, rounds=rounds)
    elif name == "dope-pool":
        pool = TrainFnPool(
            partial(train_weights, epochs=int(cfg["local-epochs"]), lr=lr),
            {f"public-{i}": load_data(private + i, int(cfg["batch-size"]))[0] for i in range(public)},
        )
        strategy = FedpubStrategy.from_config(dope, population=private, rounds=rounds, public_pool=pool)
    elif name == "dope-nodes":
        strategy = FedpubStrategy.from_config(dope, population=private, rounds=rounds, public_nodes=True,
                                              fraction_evaluate=float(cfg["fraction-evaluate"]))
    else:
        raise ValueError(f"run config strategy={name!r}: give fedavg, dp-fedavg, dope-pool or dope-nodes")
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=rounds,
                            train_config=ConfigRecord({"lr": lr}),
                            evaluate_fn=CentralEvaluation(private + public, int(cfg["batch-size"])))
    central = result.evaluate_metrics_serverapp
    seconds = sorted(central[t]["round_seconds"] for t in range(2, rounds + 1)) or [central[1]["round_seconds"]]
    epsilon = f", user-level ε = {strategy.epsilon():.3f}" if isinstance(strategy, FedpubStrategy) else ""
    log(INFO, "quickstart-dp: %s, %d rounds, accuracy %.3f, median round %.2f s (after round 1)%s", name, rounds,
        central[rounds]["accuracy"], seconds[len(seconds) // 2], epsilon)
