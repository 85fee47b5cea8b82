"""The ServerApp: fedpub's DOPE-SGD strategy (user-level DP, public users recenter the clip), as short as FedAvg.

The private users are the ``population`` nodes that say they are private; the public users are the
``num-public`` nodes that say they are public (``public_nodes=True``). The server holds no data: the model
starts at zero.
"""

from __future__ import annotations

from logging import INFO

from flwr.app import ArrayRecord, Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from drop_in_app.task import Net, setting
from fedpub.strategies.flower import FedpubStrategy

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = lambda key: setting(context.run_config, key)  # noqa: E731
    rounds, delta, seed = int(config("num-rounds")), float(config("delta")), int(config("seed"))
    strategy = FedpubStrategy.from_config(
        {
            "name": "dope",
            "public_clients_per_round": int(config("public-clients-per-round")),
            "clip_norm": float(config("clip-norm")),
            "noise_multiplier": float(config("noise-multiplier")),
            "sampling": {"kind": "poisson", "clients_per_round": float(config("clients-per-round"))},
        },
        population=int(config("population")),
        rounds=rounds,
        privacy={"delta": delta},
        seed=None if seed < 0 else seed,
        public_nodes=True,
        public_population=int(config("num-public")),
    )
    strategy.start(
        grid,
        initial_arrays=ArrayRecord(Net().state_dict()),
        num_rounds=rounds,
        timeout=float(config("round-timeout")),
    )
    log(INFO, "fedpub: user-level (ε = %.3f, δ = %g)-DP after %d rounds", strategy.epsilon(), delta, rounds)
