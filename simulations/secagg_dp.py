"""User-level DP-FedAvg (or DP-FTRL) with client-side clipping, Flower's secure aggregation (SecAgg+) and
server noise.

The server never sees one user's update, only the sum of the cohort's:

* each sampled node trains its user (``fedpub.clients.client_app.train_user``, as the Flower ClientApp does),
  clips the update Δ to L2 norm C **on the device** (the clip step's ``clip_factors``) and replies through
  Flower's ``secaggplus_mod``, which quantises and masks it;
* the ServerApp runs Flower's ``SecAggPlusWorkflow`` inside ``DefaultWorkflow`` with a legacy ``Strategy``
  (the workflow needs a ``LegacyContext``; Flower 1.41 has no SecAgg+ for the message-API strategies).
  The workflow unmasks the sum and hands the strategy the mean over the k survivors, so the strategy
  recovers the sum as k × that mean, divides it by the expected cohort m, adds the recipe's noise with its
  own noise step (``strategy_steps``' ``noise``: the Gaussian of std z·C/m, or DP-FTRL's tree noise; same
  seed, same draws as the in-process engine) and applies the server optimizer step. The round's event, from
  the noise step's events and the cohort rule, is priced and composed by the round driver.

Cohorts: the strategy draws them with fedpub's cohort rule, either exactly m of the N private users without
replacement each round (``strategy.sampling.kind: fixed``, accounted as
``SampledWithoutReplacementDpEvent(N, m, Gaussian(z/2))`` under replace-one neighbours) or DP-FTRL's blocks
(``epoch_blocks``: each user once an epoch, replace-special neighbours); both need ``accountant: rdp``.
Poisson cohorts are refused: SecAgg+ halts a round of fewer than 2 users, and a release that happens only
for some cohort sizes is not the mechanism the accountant prices. A round whose users all dropped releases
the noise on a zero sum, as the core does for a cohort that failed.

Quantisation: SecAgg+ maps each coordinate of the (weight-1) update from [-c, c] to integers in [0, T] by
stochastic rounding, sums them modulo M and maps back. With c = C no coordinate of a C-clipped update is
cut, and T = ⌊(M − 1)/m⌋ (at most 2^30) keeps the sum of m updates, and the weight total m·T, below M:
nothing wraps. The error of the sum is under k·2c/T per coordinate (k survivors).

What the server still sees in the clear: which users were sampled and which dropped, nothing per user
(the reply carries no metrics and weight 1). Only plain DP-FedAvg or DP-FTRL is run: fixed C, no public
users, no part but those whose declaration lists the transport ``flower_secagg`` (:mod:`fedpub.recipe_registry`:
DP-FTRL's tree aggregation). No checkpoint/resume, no experiment tracking.

Run it: ``python -m fedpub.simulations.secagg_dp CONFIG [--rounds R]`` (Flower simulation, one SuperNode per
training user); it prints each round's noise std and ε and writes ``<output_dir>/<name>/secagg_dp.json``, the
released figures (ε, the events, the noise, the evaluation), and, with diagnostics on (``privacy.diagnostics``; on in
a simulation), ``secagg_dp_diagnostics.json``: each round's cohort (the sampled user ids) and how many users SecAgg+
summed, outside the DP guarantee (a published cohort voids the amplification by sampling the accountant counts).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.common import Code, FitIns, FitRes, Parameters, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.logger import log
from flwr.compat.common import recorddict_compat as compat
from flwr.server import LegacyContext, ServerConfig
from flwr.server.client_manager import ClientManager, SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import Grid, ServerApp

from fedpub.clients.client_app import ClientRuntime, node_client_id, query_reply, runtime, train_user
from fedpub import protocol as key
from fedpub import recipe_registry
from fedpub import tree
from fedpub.atomic import write_json_atomic
from fedpub.cohort_updates import Cohort
from fedpub.config import ExperimentConfig, TrackingConfig, load_config, parse_config
from fedpub.models.seeded import model_params
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.events import CohortRule, EpochBlocks, FixedSizeSampling, event_to_dict, round_event
from fedpub.steps.clip import clip_factors
from fedpub.types import Params, RoundContext, Updates
from fedpub.simulations.evaluation import EvaluationSet, evaluate
from fedpub.simulations.experiment import Experiment, build_experiment
from fedpub.simulations.flower_env import offline_flower_environment
from fedpub.simulations.flower_simulation import backend_config
from fedpub.strategies.common import secure_noise_sampler
from fedpub.strategies.build_context import BuildContext
from fedpub.strategies.compose import strategy_steps
from fedpub.strategies.flower import discover_nodes

MODULUS_RANGE = 2**32
"""SecAgg+'s modulus M: its largest allowed value (a power of 2)."""
MAX_QUANTIZATION_RANGE = 2**30
"""Cap on T: the clients' stochastic rounding casts to int32."""
RESULT_FILE = "secagg_dp.json"
DIAGNOSTICS_FILE = "secagg_dp_diagnostics.json"


# -- configuration ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Quantisation:
    """SecAgg+'s quantisation of a cohort of m C-clipped updates (each sent with weight 1)."""

    clipping_range: float
    """c: SecAgg+ clips each coordinate to [-c, c]; c = C, so a C-clipped update is never cut."""
    quantization_range: int
    """T: [-c, c] maps to the integers [0, T]."""
    modulus_range: int
    """M: sums are taken modulo M."""

    @property
    def step(self) -> float:
        """One quantisation level, 2c/T."""
        return 2 * self.clipping_range / self.quantization_range

    def max_sum_error(self, survivors: int) -> float:
        """Bound on the error of one coordinate of the unmasked sum: stochastic rounding moves each
        survivor's coordinate by less than one level."""
        return survivors * self.step


def quantisation_for(clip_norm: float, cohort_size: int, modulus_range: int = MODULUS_RANGE) -> Quantisation:
    """c = C and the largest T with m·T < M (at most 2^30): the m quantised updates (each in [0, T]) and
    their weight total m·T never wrap modulo M."""
    if not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ValueError(f"SecAgg+ needs a finite clip norm C > 0 (its clipping range), got {clip_norm}")
    if cohort_size < 2:
        raise ValueError(f"SecAgg+ needs a cohort of at least 2 users, got {cohort_size}")
    quantization_range = min((modulus_range - 1) // cohort_size, MAX_QUANTIZATION_RANGE)
    return Quantisation(float(clip_norm), int(quantization_range), int(modulus_range))


def largest_cohort(sampling: CohortRule) -> int:
    """The most users a round of ``sampling`` sums: the fixed size, or the largest epoch block (⌈N/k⌉)."""
    if isinstance(sampling, FixedSizeSampling):
        return sampling.cohort_size
    if isinstance(sampling, EpochBlocks):
        return math.ceil(sampling.population / sampling.rounds_per_epoch)
    raise TypeError(f"the SecAgg+ variant needs fixed-size sampling or epoch blocks, got {sampling!r}")


@dataclass(frozen=True)
class SecAggSettings:
    """The SecAgg+ protocol's shares: floats are fractions of the cohort (of the shares for the threshold)."""

    num_shares: int | float = 1.0
    reconstruction_threshold: int | float = 2 / 3


def check_supported(config: ExperimentConfig) -> None:
    """Refuse what the SecAgg+ variant does not run (see the module docstring), saying why."""
    strategy = config.strategy
    if strategy.sampling.kind == "poisson":
        raise ValueError(
            "the SecAgg+ variant needs a fixed number of users each round: set strategy.sampling.kind: fixed "
            "(or epoch_blocks; and privacy.accountant: rdp, which accounts both)"
        )
    if not math.isfinite(strategy.clip_norm):
        raise ValueError("the SecAgg+ variant needs a finite strategy.clip_norm (clients clip, SecAgg+ quantises)")
    unsupported = recipe_registry.unsupported(strategy, "flower_secagg")
    if strategy.public_clients_per_round:
        unsupported.append("public_clients_per_round")
    if unsupported:
        parts = recipe_registry.supported("flower_secagg")
        raise ValueError(
            "the SecAgg+ variant runs DP-FedAvg's private mean (fixed C, server optimizer) with no part but "
            f"strategy.{', strategy.'.join(parts)}; remove "
            f"strategy.{', strategy.'.join(unsupported)} or run in-process (fedpub run CONFIG)"
        )
    if config.tracking != TrackingConfig():
        raise ValueError("the SecAgg+ variant writes secagg_dp.json only and sends nothing to a tracker: remove "
                         "tracking, or run in-process (fedpub run CONFIG)")


# -- the client ---------------------------------------------------------------------------------
def clip_update(update: Updates, clip_norm: float) -> Updates:
    """Δ · min(1, C/‖Δ‖): the server-side clip step's arithmetic (the cohort's norms, ``clip_factors``) on one
    user."""
    one = Cohort([update], update)
    clipped = one.scale(clip_factors(one.norms(), clip_norm)).stacked()
    return {k: v[0] for k, v in clipped.items()}


def client_contribution(rt: ClientRuntime, client_id: str, params: Params, round_index: int) -> Updates:
    """What one user adds to the secure sum: its update from ``params``, trained with the generator every
    backend uses for (seed, round, user), clipped to C on the device."""
    return clip_update(train_user(rt, client_id, params, round_index).update, rt.config.strategy.clip_norm)


def tensors_from_parameters(parameters: Parameters, reference: Params) -> dict[str, torch.Tensor]:
    """Legacy ``Parameters`` as named tensors, in ``reference``'s order, shapes checked."""
    arrays = parameters_to_ndarrays(parameters)
    if len(arrays) != len(reference):
        raise ValueError(f"expected {len(reference)} arrays, got {len(arrays)}")
    named = {}
    for (name, ref), array in zip(reference.items(), arrays, strict=True):
        if tuple(array.shape) != tuple(ref.shape):
            raise ValueError(f"array for {name} has shape {array.shape}, expected {tuple(ref.shape)}")
        named[name] = torch.from_numpy(np.array(array, copy=True))
    return named


def masked_train_reply(msg: Message, context: Context, config: ExperimentConfig) -> Message:
    """Train this node's user, clip its update to C and reply in the legacy FitRes layout that
    ``secaggplus_mod`` quantises and masks: the update in float64 (quantised without float32 rounding),
    weight 1 (``num_examples``, so the workflow's weighted mean is the plain mean) and no metrics, since
    anything else in the reply would reach the server unmasked."""
    rt = runtime(config)
    client_id = node_client_id(context, rt)
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    asked = str(fitins.config[key.CLIENT_ID])
    if asked != client_id:
        raise ValueError(f"the server asked for user {asked}, but this node holds {client_id}")
    reference = {name: p.detach() for name, p in rt.model.named_parameters()}
    params = {k: v.to(reference[k].dtype) for k, v in tensors_from_parameters(fitins.parameters, reference).items()}
    update = client_contribution(rt, client_id, params, int(fitins.config[key.ROUND]))
    arrays = [update[name].double().numpy() for name in reference]
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), num_examples=1, metrics={})
    return Message(compat.fitres_to_recorddict(fitres, keep_input=False), reply_to=msg)


def make_client_app(config: ExperimentConfig) -> ClientApp:
    """A ClientApp bound to ``config``: QUERY says which user the node holds; TRAIN goes through SecAgg+."""
    from flwr.client.mod import secaggplus_mod

    app = ClientApp()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return query_reply(msg, context, config)

    @app.train(mods=[secaggplus_mod])
    def train(msg: Message, context: Context) -> Message:
        return masked_train_reply(msg, context, config)

    return app


# -- the server ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SecAggRound:
    """One aggregated round as the server saw it."""

    round: int
    cohort: list[str]
    survivors: int
    secure_sum: dict[str, torch.Tensor]
    """Σ of the survivors' clipped updates, as SecAgg+ unmasked it (float64)."""
    released_mean: dict[str, torch.Tensor]
    """Σ/m plus the Gaussian noise: what the round releases."""
    params: Params
    """The global model after the server optimizer step."""
    noise_std: float
    epsilon: float
    metrics: dict[str, float]


@dataclass(frozen=True)
class SecAggRunResult:
    params: Params
    rounds: list[dict[str, Any]]
    """Each round's released record (ε, its event, the noise, the evaluation)."""
    diagnostics: list[dict[str, Any]]
    """Each round's cohort and survivors: outside DP (``DIAGNOSTICS_FILE``, when the experiment writes diagnostics)."""
    epsilon: float
    delta: float
    stopped_by_budget: bool
    quantisation: Quantisation
    result_path: Path
    diagnostics_path: Path | None


def to_parameters(params: Params) -> Parameters:
    return ndarrays_to_parameters([v.detach().cpu().numpy() for v in params.values()])


class SecAggDpStrategy(Strategy):
    """The legacy Strategy ``SecAggPlusWorkflow`` drives: draws the round's cohort, receives the unmasked sum,
    adds the recipe's noise, steps the server optimizer and accounts the round."""

    def __init__(
        self,
        experiment: Experiment,
        node_of: dict[str, int],
        on_round: Callable[[SecAggRound], None] | None = None,
    ) -> None:
        config = experiment.config
        self.experiment, self.node_of, self.on_round = experiment, node_of, on_round
        self.core = experiment.strategy
        self.model = experiment.new_model()
        self.params = model_params(self.model)
        secure = secure_noise_sampler(config.privacy.noise_sampler, reproducible=not experiment.randomness.secret)
        steps = dict(strategy_steps(BuildContext(
            config.strategy, self.core.sampling, self.core.population, experiment.noise_multiplier, self.core.seed,
            config.rounds, secure_sampler=secure,
        )))
        self.noise, self.server_opt = steps["noise"], steps["server_opt"]
        self.noise_state, self.opt_state = self.noise.init(self.params), self.server_opt.init(self.params)
        self.driver = experiment.round_driver(experiment.new_accountant())
        """Plans the cohorts and holds the one budget rule and the accountant (the SecAgg+ sum is aggregated here)."""
        self.eval_set = EvaluationSet.pooled(experiment.test, experiment.eval_users.ids, experiment.device)
        self.records: list[dict[str, Any]] = []
        self.diagnostics: list[dict[str, Any]] = []
        self._cohort: list[str] = []

    @property
    def accountant(self) -> UserLevelAccountant:
        return self.driver.accountant

    @property
    def stopped_by_budget(self) -> bool:
        return self.driver.stopped_by_budget

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return to_parameters(self.params)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        t = server_round - 1
        if self.stopped_by_budget:
            return []
        if not self.driver.admit(t):
            log(WARNING, "fedpub: %s", self.driver.refusal)
            return []
        self._cohort = list(self.driver.plan(t, None).private_cohort)
        proxies = {proxy.node_id: proxy for proxy in client_manager.all().values()}
        missing = [cid for cid in self._cohort if self.node_of[cid] not in proxies]
        if missing:
            raise RuntimeError(f"round {t}: the nodes of users {missing} are no longer connected")
        model = to_parameters(self.params)
        return [
            (proxies[self.node_of[cid]], FitIns(model, {key.ROUND: t, key.CLIENT_ID: cid})) for cid in self._cohort
        ]

    def aggregate_fit(
        self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures: list[Any]
    ) -> tuple[Parameters | None, dict[str, Any]]:
        t = server_round - 1
        if failures:
            log(WARNING, "fedpub: %d of %d sampled users dropped in round %d", len(failures), len(self._cohort), t)
        # SecAggPlusWorkflow gives every result the same parameters: the weighted mean of the survivors'
        # updates, all weights 1 here, so the sum is k times it (zero when every user dropped).
        survivors = len(results)
        if results:
            mean = tensors_from_parameters(results[0][1].parameters, self.params)
            secure_sum = {k: v.double() * survivors for k, v in mean.items()}
        else:
            secure_sum = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in self.params.items()}
        outcome = self.release(t, secure_sum, survivors)
        if outcome is None:
            return None, {}
        return to_parameters(outcome.params), {"epsilon": outcome.epsilon, "noise_std": outcome.noise_std}

    def release(self, t: int, secure_sum: dict[str, torch.Tensor], survivors: int) -> SecAggRound | None:
        """Σ/m + the recipe's noise (its noise step, which emits the round's events), then the server
        optimizer step; the round driver prices the round's event against the budget and composes it (None, and
        nothing released, when the budget stops the run)."""
        m = self.core.expected_cohort
        ctx = RoundContext(
            round=t, seed=self.core.seed, population=self.core.population,
            sampling_rate=m / self.core.population, expected_cohort=m, cohort_size=len(self._cohort),
        )
        mean = {k: (v / m).to(self.params[k].dtype) for k, v in secure_sum.items()}
        noised = self.noise.update(
            mean, self.noise_state, ctx=ctx, clip_norm=self.experiment.config.strategy.clip_norm
        )
        event = round_event(self.core.sampling, noised.events)
        if not self.driver.release(event, {"cohort_sampled": len(self._cohort),
                                           "cohort_failed": len(self._cohort) - survivors}, round_index=t):
            log(WARNING, "fedpub: %s", self.driver.refusal)
            return None
        stepped = self.server_opt.update(noised.updates, self.opt_state, ctx=ctx)
        self.noise_state, self.opt_state = noised.state, stepped.state
        self.params = tree.add(self.params, stepped.updates)
        epsilon = self.accountant.epsilon(self.experiment.config.privacy.delta)
        metrics = {k: float(noised.metrics[k]) for k in ("noise_multiplier", "noise_std")}
        config = self.experiment.config
        if (t + 1) % config.eval_every == 0 or t + 1 == config.rounds:
            metrics.update(evaluate(self.model, self.params, self.eval_set, self.experiment.task))
        outcome = SecAggRound(
            t, list(self._cohort), survivors, secure_sum, noised.updates, self.params,
            metrics["noise_std"], epsilon, metrics,
        )
        self.records.append({"round": t, "epsilon": epsilon, "event": event_to_dict(event), **metrics})
        self.diagnostics.append(
            {"round": t, "cohort": outcome.cohort, "cohort_sampled": len(self._cohort), "survivors": survivors}
        )
        log(INFO, "fedpub SecAgg+: round %d, %d of %d users summed, noise std z·C/m = %.4g, ε = %.4g",
            t, survivors, len(self._cohort), outcome.noise_std, epsilon)
        if self.on_round is not None:
            self.on_round(outcome)
        return outcome

    # The server evaluates centrally in ``release``; no federated evaluation (it would be unmasked).
    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager) -> list:
        return []

    def aggregate_evaluate(self, server_round: int, results: list, failures: list) -> tuple[float | None, dict]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict] | None:
        return None


def make_server_app(
    config: ExperimentConfig,
    results: list[SecAggRunResult],
    *,
    secagg: SecAggSettings = SecAggSettings(),
    on_round: Callable[[SecAggRound], None] | None = None,
) -> ServerApp:
    """A ServerApp running ``config`` with SecAgg+; its result is appended to ``results``."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        check_supported(config)
        experiment = build_experiment(config)
        sampling = experiment.strategy.sampling
        quantisation = quantisation_for(config.strategy.clip_norm, largest_cohort(sampling))
        nodes = discover_nodes(
            grid, population=len(experiment.private_ids), private_ids=experiment.private_ids,
            node_wait_timeout=config.flower.node_wait_timeout,
        )
        strategy = SecAggDpStrategy(experiment, nodes.private, on_round)
        workflow = DefaultWorkflow(
            fit_workflow=SecAggPlusWorkflow(
                num_shares=secagg.num_shares,
                reconstruction_threshold=secagg.reconstruction_threshold,
                max_weight=1.0,
                clipping_range=quantisation.clipping_range,
                quantization_range=quantisation.quantization_range,
                modulus_range=quantisation.modulus_range,
                timeout=config.flower.round_timeout,
            )
        )
        legacy = LegacyContext(
            context, config=ServerConfig(num_rounds=config.rounds), strategy=strategy,
            client_manager=SimpleClientManager(),
        )
        workflow(grid, legacy)
        delta = config.privacy.delta
        path = Path(config.output_dir) / config.name / RESULT_FILE
        summary = {
            "config": config.name,
            "variant": f"client-side clipping + SecAgg+ + server noise ({config.strategy.name})",
            "sampling": {"kind": type(sampling).__name__, **asdict(sampling)},
            "accountant": experiment.new_accountant().accountant,
            "noise_multiplier": experiment.noise_multiplier,
            "clip_norm": config.strategy.clip_norm,
            "secagg": {**asdict(secagg), **asdict(quantisation), "max_weight": 1.0,
                       "quantisation_step": quantisation.step},
            "rounds": strategy.records,
            "epsilon": strategy.accountant.epsilon(delta),
            "delta": delta,
            "stopped_by_budget": strategy.stopped_by_budget,
        }
        write_json_atomic(path, summary)
        diagnostics_path = path.with_name(DIAGNOSTICS_FILE) if experiment.diagnostics else None
        if diagnostics_path is not None:
            write_json_atomic(diagnostics_path, {
                "outside_dp": "the realised cohorts and survivors of private users: not covered by DP, the server's "
                              "eyes only (published, the cohorts void the amplification by sampling)",
                "rounds": strategy.diagnostics,
            })
        results.append(SecAggRunResult(
            strategy.params, strategy.records, strategy.diagnostics, summary["epsilon"], delta,
            strategy.stopped_by_budget, quantisation, path, diagnostics_path,
        ))

    return app


def run_secagg_simulation(
    config: ExperimentConfig,
    *,
    secagg: SecAggSettings = SecAggSettings(),
    on_round: Callable[[SecAggRound], None] | None = None,
) -> SecAggRunResult:
    """Run ``config`` in Flower simulation, one SuperNode per training user, with SecAgg+."""
    check_supported(config)
    experiment = build_experiment(config)  # config errors (data, accountant, budget) before Ray starts
    offline_flower_environment()
    from flwr.simulation import run_simulation

    results: list[SecAggRunResult] = []
    run_simulation(
        server_app=make_server_app(config, results, secagg=secagg, on_round=on_round),
        client_app=make_client_app(config),
        num_supernodes=len(experiment.train.client_ids),
        backend_config=backend_config(config.flower),
    )
    if not results:
        raise RuntimeError("the SecAgg+ simulation ended without a result; see the log above")
    return results[0]


def _share(text: str) -> int | float:
    return float(text) if "." in text else int(text)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fedpub.simulations.secagg_dp",
        description="DP-FedAvg or DP-FTRL with client-side clipping, SecAgg+ and server noise, in Flower simulation",
    )
    parser.add_argument(
        "config", type=Path, help="experiment YAML (strategy.sampling.kind: fixed or epoch_blocks, accountant: rdp)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="override the config's rounds")
    parser.add_argument("--num-shares", type=_share, default=SecAggSettings.num_shares,
                        help="SecAgg+ shares per user key: an int, or a fraction of the cohort (default 1.0)")
    parser.add_argument("--reconstruction-threshold", type=_share, default=SecAggSettings.reconstruction_threshold,
                        help="shares needed to rebuild a key: an int, or a fraction of the shares (default 2/3)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        if args.rounds is not None:
            config = parse_config({**config.model_dump(mode="json"), "rounds": args.rounds}, str(args.config))
        check_supported(config)
        build_experiment(config)
    except ValueError as error:  # ConfigError and PrivacyError are ValueErrors
        parser.exit(2, f"error: {error}\n")

    def report(outcome: SecAggRound) -> None:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in outcome.metrics.items() if k.startswith("eval_"))
        print(
            f"round {outcome.round}: {outcome.survivors}/{len(outcome.cohort)} users summed by SecAgg+, "
            f"noise std z·C/m = {outcome.noise_std:.4g}, ε = {outcome.epsilon:.4g}" + (f", {shown}" if shown else ""),
            flush=True,
        )

    started = time.perf_counter()
    result = run_secagg_simulation(
        config, secagg=SecAggSettings(args.num_shares, args.reconstruction_threshold), on_round=report
    )
    q = result.quantisation
    print(
        f"{len(result.rounds)} rounds in {time.perf_counter() - started:.0f} s; ε = {result.epsilon:.4g} at "
        f"δ = {result.delta:g}; SecAgg+ c = {q.clipping_range:g}, T = {q.quantization_range}, M = {q.modulus_range} "
        f"(level {q.step:.3g}); results in {result.result_path}"
    )


if __name__ == "__main__":
    main()
