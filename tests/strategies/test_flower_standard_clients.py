"""Standard Flower ClientApps (only ``@app.train()``, new weights under ``arrays``) against fedpub's strategy built
with :meth:`FedpubStrategy.from_config`, in Flower simulation (real Flower, real Ray).

Such a node is one private user named by its node id, and the server computes its update from the weights it
sent; a round that sends a preconditioner (AdaDPS on the clients) refuses its replies, and a run whose sampled
users all keep failing stops with :class:`CohortsKeepFailing`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedpub.round_driver import CohortsKeepFailing, PublicUpdateRefused, RoundPlan
from fedpub.simulations.flower.environment import offline_flower_environment
from fedpub.strategies.flower import FedpubStrategy, ProtocolMismatch

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them

BACKEND = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}}
NUM_EXAMPLES = 10


def initial_model() -> dict[str, torch.Tensor]:
    return {"w": torch.zeros(3), "b": torch.full((2, 2), 0.5)}


def shift_of(partition_id: int) -> float:
    """What the node of ``partition_id`` adds to every weight (exact in float32)."""
    return 0.25 * (partition_id + 1)


shifting_app = ClientApp()


@shifting_app.train()
def shift(msg: Message, context: Context) -> Message:
    """A standard ClientApp whose "training" adds a node-specific constant to every weight."""
    weights = msg.content["arrays"].to_torch_state_dict()
    c = shift_of(int(context.node_config["partition-id"]))
    return Message(
        RecordDict({
            "arrays": ArrayRecord({k: v + c for k, v in weights.items()}),
            "metrics": MetricRecord({"num-examples": NUM_EXAMPLES}),
        }),
        reply_to=msg,
    )


wrapped_app = ClientApp()


@wrapped_app.train()
def reply_wrapped(msg: Message, context: Context) -> Message:
    """A ClientApp that replies the state dict of a DataParallel-wrapped model: every name prefixed `module.`."""
    weights = msg.content["arrays"].to_torch_state_dict()
    return Message(RecordDict({"arrays": ArrayRecord({f"module.{k}": v + 1 for k, v in weights.items()})}),
                   reply_to=msg)


misnamed_record_app = ClientApp()


@misnamed_record_app.train()
def reply_under_model(msg: Message, context: Context) -> Message:
    """A ClientApp that replies its new weights under `model` instead of `arrays`."""
    return Message(RecordDict({"model": msg.content["arrays"]}), reply_to=msg)


failing_app = ClientApp()


@failing_app.train()
def fail(msg: Message, context: Context) -> Message:
    raise RuntimeError("this ClientApp cannot train")


@dataclass
class Run:
    """What the ServerApp of :func:`run_in_simulation` saw."""

    strategy: FedpubStrategy | None = None
    result: Any = None
    error: BaseException | None = None
    rounds: list[tuple[int, Mapping[str, float], int]] = field(default_factory=list)
    """(round, the outcome's metrics, the private replies' example count) of every released round."""


def run_in_simulation(
    make_strategy: Callable[[Callable], FedpubStrategy], client_app: ClientApp, *, num_supernodes: int,
    rounds: int | Sequence[int],
) -> Run:
    """Run the strategy ``make_strategy(on_round)`` builds from :func:`initial_model` for ``rounds`` rounds
    (``strategy.start(num_rounds=rounds)``; a sequence: one start after the other, each from the last result's
    model, until one raises)."""
    run = Run()
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        run.strategy = make_strategy(lambda t, outcome, _, examples: run.rounds.append((t, {**outcome.metrics, **outcome.diagnostics}, examples)))
        arrays = ArrayRecord(initial_model())
        try:
            for count in [rounds] if isinstance(rounds, int) else rounds:
                run.result = run.strategy.start(grid, initial_arrays=arrays, num_rounds=count, timeout=120)
                arrays = run.result.arrays
        except Exception as error:  # noqa: BLE001 (run_simulation would only log it)
            run.error = error

    offline_flower_environment()
    from flwr.simulation import run_simulation

    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=num_supernodes, backend_config=BACKEND)
    return run


def test_standard_clients_updates_are_computed_on_the_server_from_their_weights():
    """No noise, no clip, every user sampled, server SGD with lr 1: each round adds the mean of the nodes'
    constants (the sum of the updates ÷ the expected cohort m = N)."""
    population, rounds = 3, 2
    strategy = {"name": "dp_fedavg", "clip_norm": float("inf"), "noise_multiplier": 0.0,
                "sampling": {"kind": "poisson", "sampling_rate": 1.0}}
    run = run_in_simulation(
        lambda on_round: FedpubStrategy.from_config(strategy, population=population, rounds=rounds, seed=0,
                                                    on_round=on_round),
        shifting_app, num_supernodes=population, rounds=rounds,
    )
    assert run.error is None, run.error
    assert run.result is not None, "the ServerApp did not finish; see the log above"
    nodes = run.strategy.nodes
    assert sorted(nodes.private) == sorted(str(node) for node in nodes.private.values())  # user id = node id
    assert nodes.public == {}

    step = sum(shift_of(i) for i in range(population)) / population
    final = run.result.arrays.to_torch_state_dict()
    for k, v in initial_model().items():
        torch.testing.assert_close(final[k], v + rounds * step, rtol=0, atol=1e-6)
    assert [t for t, _, _ in run.rounds] == list(range(rounds))
    for _, metrics, examples in run.rounds:
        assert metrics["cohort_sampled"] == population and metrics["cohort_failed"] == 0
        assert examples == population * NUM_EXAMPLES  # num-examples of the standard replies reached on_round


@dataclass
class TinyPublicPool:
    """Public users the server trains itself: every public update adds 0.1 to every weight."""

    client_ids: Sequence[str] = ("public-0",)
    sent_preconditioner: list[tuple[int, bool]] = field(default_factory=list)
    """(round, whether the round sends the private clients a preconditioner)."""

    def train(self, params: Mapping[str, torch.Tensor], plan: RoundPlan) -> dict[str, dict[str, torch.Tensor]]:
        self.sent_preconditioner.append((plan.round, "preconditioner" in plan.private_payloads))
        return {cid: {k: torch.full_like(v, 0.1) for k, v in params.items()} for cid in plan.public_cohort}


def test_standard_clients_replies_to_a_preconditioner_are_refused_until_the_run_stops():
    """AdaDPS on the clients: round 0 sends no preconditioner (no public statistics yet) and the standard replies
    count; from round 1 on the private nodes are sent the public preconditioner, which a standard ClientApp ignores:
    its replies are refused, every sampled user fails, and after 2 such rounds the strategy stops."""
    population, pool = 3, TinyPublicPool()
    strategy = {"name": "adadps", "public_clients_per_round": 1, "clip_norm": 1.0, "noise_multiplier": 1.0,
                "sampling": {"kind": "poisson", "sampling_rate": 1.0}}
    run = run_in_simulation(
        lambda on_round: FedpubStrategy.from_config(
            strategy, population=population, rounds=3, seed=0, public_pool=pool, stop_after_failed_rounds=2,
            on_round=on_round,
        ),
        shifting_app, num_supernodes=population, rounds=3,
    )
    assert isinstance(run.error, CohortsKeepFailing), run.error
    assert "every sampled user failed in rounds 1 to 2" in str(run.error)
    assert pool.sent_preconditioner == [(0, False), (1, True), (2, True)]
    assert [(t, m["cohort_sampled"], m["cohort_failed"], m["public_cohort_used"]) for t, m, _ in run.rounds] == [
        (0, 3, 0, 1), (1, 3, 3, 1), (2, 3, 3, 1)
    ]
    assert run.strategy.driver.failed_streak == 2


@pytest.mark.extended  # the in-process engine's failing cohorts stay in the suite
def test_clients_that_always_fail_stop_the_run():
    run = run_in_simulation(
        lambda on_round: FedpubStrategy.from_config(
            {"name": "dp_fedavg", "clip_norm": 1.0, "noise_multiplier": 1.0,
             "sampling": {"kind": "poisson", "sampling_rate": 1.0}},
            population=2, rounds=3, seed=0, stop_after_failed_rounds=2, on_round=on_round,
        ),
        failing_app, num_supernodes=2, rounds=3,
    )
    assert isinstance(run.error, CohortsKeepFailing), run.error
    assert "every sampled user failed in rounds 0 to 1" in str(run.error)
    assert [(t, m["cohort_sampled"], m["cohort_failed"]) for t, m, _ in run.rounds] == [(0, 2, 2), (1, 2, 2)]


DOPE = {"name": "dope", "public_clients_per_round": 2, "clip_norm": 1.0, "noise_multiplier": 1.0,
        "sampling": {"kind": "poisson", "clients_per_round": 2}}


def test_a_recipe_that_trains_public_users_needs_a_public_pool_or_public_nodes():
    with pytest.raises(ValueError, match="public_pool") as refused:
        FedpubStrategy.from_config(DOPE, population=4, rounds=2, seed=0)
    assert "public_nodes=True" in str(refused.value)
    with pytest.raises(ValueError, match="not both"):
        FedpubStrategy.from_config(DOPE, population=4, rounds=2, seed=0, public_pool=TinyPublicPool(),
                                   public_nodes=True)
    assert FedpubStrategy.from_config(DOPE, population=4, rounds=2, seed=0, public_nodes=True).public_nodes


def test_pda_dpmd_pretrains_by_default_so_the_drop_in_strategy_asks_for_a_public_trainer_or_null():
    pda = {**DOPE, "name": "pda_dpmd"}
    with pytest.raises(ValueError, match="strategy.warm_start") as refused:
        FedpubStrategy.from_config(pda, population=4, rounds=2, seed=0, public_nodes=True)
    assert "give public_trainer=" in str(refused.value) and "turn them off (null)" in str(refused.value)
    cold = FedpubStrategy.from_config({**pda, "warm_start": None}, population=4, rounds=2, seed=0, public_nodes=True)
    assert cold.core.name == "pda_dpmd"


def test_a_start_of_more_rounds_than_the_strategy_was_built_for_is_refused_before_anything_runs():
    """from_config(rounds=2): start(num_rounds=4) is refused at once, naming both numbers (the noise was calibrated
    over 2 rounds); nothing is sent, trained or priced (issue 44: check before spending)."""
    strategy = {"name": "dp_fedavg", "clip_norm": 1.0, "target_epsilon": 4.0,
                "sampling": {"kind": "poisson", "sampling_rate": 1.0}}
    run = run_in_simulation(
        lambda on_round: FedpubStrategy.from_config(strategy, population=3, rounds=2, seed=0, on_round=on_round),
        shifting_app, num_supernodes=3, rounds=4,
    )
    assert isinstance(run.error, ValueError), run.error
    assert str(run.error).startswith("start(num_rounds=4): the strategy was built for rounds=2 (its noise calibrated "
                                     "over them; 2 left, ε = 0 spent): give num_rounds <= 2")
    assert run.rounds == [] and run.strategy.epsilon() == 0


def test_a_second_start_continues_the_ledger_with_fresh_cohorts_and_a_used_up_strategy_refuses_a_third():
    """Two starts of 2 rounds run what one start of 4 runs: the round indices continue (the cohorts are the next
    rounds', not the first rounds' again: the same sizes as one start's), ε composes all four; a third start is
    refused before it runs (issue 44, item 4: a second start() re-ran rounds 0 and 1 and under-reported ε). The
    models are not compared: each simulation gives its nodes other ids, so other users hold other shifts."""
    strategy = {"name": "dp_fedavg", "clip_norm": 1.0, "noise_multiplier": 1.0,
                "sampling": {"kind": "poisson", "sampling_rate": 0.5}}

    def make(on_round):
        return FedpubStrategy.from_config(strategy, population=4, rounds=4, seed=3, on_round=on_round)

    once = run_in_simulation(make, shifting_app, num_supernodes=4, rounds=4)
    twice = run_in_simulation(make, shifting_app, num_supernodes=4, rounds=[2, 2, 1])
    assert once.error is None, once.error
    assert isinstance(twice.error, ValueError) and "rounds=4 (its noise calibrated over them; 4 already run, 0 left" \
        in str(twice.error)
    assert [t for t, _, _ in twice.rounds] == [t for t, _, _ in once.rounds] == [0, 1, 2, 3]
    assert [m["cohort_sampled"] for _, m, _ in twice.rounds] == [m["cohort_sampled"] for _, m, _ in once.rounds]
    assert twice.strategy.epsilon() == pytest.approx(once.strategy.epsilon(), rel=1e-12)
    assert twice.strategy.accountant.rounds == once.strategy.accountant.rounds == 4


@pytest.mark.parametrize("client_app, says", [
    (wrapped_app, r"every name has the prefix `module\.` the model's names do not"),
    pytest.param(misnamed_record_app, r"no `update` or `arrays` record \(got \['model'\]\)", marks=pytest.mark.extended),
])
def test_replies_that_do_not_fit_the_model_stop_the_first_round_before_it_is_released(client_app, says):
    run = run_in_simulation(
        lambda on_round: FedpubStrategy.from_config(
            {"name": "dp_fedavg", "clip_norm": 1.0, "noise_multiplier": 1.0,
             "sampling": {"kind": "poisson", "sampling_rate": 1.0}},
            population=2, rounds=3, seed=0, on_round=on_round,
        ),
        client_app, num_supernodes=2, rounds=3,
    )
    assert isinstance(run.error, ProtocolMismatch), run.error
    assert str(run.error).startswith("round 0: every reply (2 of 2 sampled private users) is malformed")
    assert "the round is not released (ε = 0 spent)" in str(run.error)
    assert re.search(says, str(run.error)), str(run.error)
    assert run.rounds == [] and run.strategy.epsilon() == 0.0 and run.strategy.accountant.rounds == 0
    print(run.error)


@dataclass
class DivergingPublicPool:
    """Public users the server trains itself; from round 1 on, public-1 diverges (an update of norm about 1e9)."""

    client_ids: Sequence[str] = ("public-0", "public-1")

    def train(self, params: Mapping[str, torch.Tensor], plan: RoundPlan) -> dict[str, dict[str, torch.Tensor]]:
        size = {"public-0": 0.1, "public-1": 1e9 if plan.round >= 1 else 0.1}
        return {cid: {k: torch.full_like(v, size[cid]) for k, v in params.items()} for cid in plan.public_cohort}


@pytest.mark.extended  # screening public updates is tested in process
def test_a_diverging_public_user_is_refused_with_a_warning_naming_it_and_the_round():
    with pytest.warns(PublicUpdateRefused) as caught:
        run = run_in_simulation(
            lambda on_round: FedpubStrategy.from_config(
                {**DOPE, "sampling": {"kind": "poisson", "sampling_rate": 1.0}}, population=2, rounds=2, seed=0,
                public_pool=DivergingPublicPool(), on_round=on_round,
            ),
            shifting_app, num_supernodes=2, rounds=2,
        )
    assert run.error is None, run.error
    messages = [str(w.message) for w in caught if w.category is PublicUpdateRefused]
    assert len(messages) == 1 and messages[0].startswith("round 1: public user public-1's update is refused: its norm")
    assert "exceeds the public update bound 100" in messages[0]
    used = [(t, m["public_cohort_used"], m["public_cohort_refused"]) for t, m, _ in run.rounds]
    assert used == [(0, 2, 0), (1, 1, 1)]
    print(messages[0])
