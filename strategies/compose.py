"""One strategy from one config: the steps of the parts it sets (:mod:`fedpub.recipe_registry`), chained by slot in
the order of docs/design.md §3.

precondition (AdaDPS) → recenter (DOPE) → project (PDP-SGD) → boosted rounds (seed 001) → clip | adaptive
clip | public schedule (PPSGD) → aggregate (÷ m) → Gaussian noise | tree noise (DP-FTRL) | banded MF noise → noise
projected (PDP-SGD) → add the center (DOPE) → mirror mix (PDA-DPMD) → server optimizer. Every part is optional, so a
config may combine them (e.g. warm start + DOPE + AdaDPS + mirror); a part either adds a slot's step or replaces
one of the private mean's. The private mean, its sensitivity C_t and its accounting are DP-FedAvg's (DP-FTRL's
with ``tree_aggregation``, banded MF's with ``noise``) whatever is composed around it. ``secure_sampler`` draws the
private mean's Gaussian noise with OpenDP (``privacy.noise_sampler: opendp``).
"""

from __future__ import annotations

from fedpub import recipe_registry
from fedpub.config import StrategyConfig
from fedpub.data.spec import resolve
from fedpub.privacy.accountant import PrivacyBudget
from fedpub.privacy.events import CohortRule
from fedpub.recipe_spec import SLOTS
from fedpub.step import Step, named_chain
from fedpub.payloads import ClientPayload
from fedpub.strategy import StrategyCore
from fedpub.types import Updates
from fedpub.strategies.build_context import BuildContext


def _noise_dimensions(config: StrategyConfig) -> int | None:
    """The fewest dimensions an active part confines the released noise to (its ``noise_dimensions``
    declaration), or None: the model's d."""
    confined = [resolve(part.noise_dimensions)(getattr(config, part.section))
                for part in recipe_registry.active(config) if part.noise_dimensions is not None]
    dimensions = [d for d in confined if d is not None]
    return min(dimensions) if dimensions else None


def strategy_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """The named steps of ``ctx.config`` in chain order (the private mean's are ``clip``, ``aggregate``,
    ``noise``): each slot's builder is the part's that fills it, else the private mean's; two parts filling one
    slot are refused, naming both."""
    builders = dict(recipe_registry.PRIVATE_MEAN)
    filled_by: dict[str, str] = {}
    for part in recipe_registry.active(ctx.config):
        for slot, ref in part.steps.items():
            if slot in filled_by:
                raise ValueError(f"strategy.{filled_by[slot]} and strategy.{part.section} both fill the chain's "
                                 f"`{slot}` step: choose one")
            builders[slot], filled_by[slot] = ref, part.section
    return [step for slot in SLOTS if slot in builders for step in resolve(builders[slot])(ctx)]

def client_payloads(config: StrategyConfig) -> tuple[ClientPayload, ...]:
    """What the config's parts send their clients (each part's ``payload_builder`` on its section); a payload a
    part does not declare by name is refused."""
    payloads: list[ClientPayload] = []
    for part in recipe_registry.active(config):
        if part.payload_builder is None:
            continue
        built = resolve(part.payload_builder)(getattr(config, part.section))
        undeclared = [p.name for p in built if p.name not in part.payloads]
        if undeclared:
            raise ValueError(f"strategy.{part.section} sends the payloads {undeclared}, which its part in "
                             f"recipe_registry.py does not declare ({list(part.payloads)})")
        payloads += built
    return tuple(payloads)


def build_strategy(
    config: StrategyConfig,
    *,
    sampling: CohortRule,
    population: int,
    noise_multiplier: float,
    seed: int,
    rounds: int,
    side_information: Updates | None = None,
    secure_sampler: bool = False,
    budget: PrivacyBudget | None = None,
) -> StrategyCore:
    """The StrategyCore of ``config``; ``side_information`` is AdaDPS's fixed A, if any; ``secure_sampler``, the
    noise from OpenDP (:func:`fedpub.strategies.common.secure_noise_sampler` says whether the config asks for it);
    ``budget``, the run's (ε, δ), which PPSGD's budget test reads (``noise_reference: tcdp``)."""
    ctx = BuildContext(config, sampling, population, noise_multiplier, seed, rounds, side_information,
                       secure_sampler, budget)
    return StrategyCore(
        config.name,
        named_chain(*strategy_steps(ctx)),
        sampling,
        population,
        seed,
        config.public_clients_per_round,
        client_payloads=client_payloads(config),
        public_update_bound=config.public_update_limit * config.clip_norm,
        noise_dimensions=_noise_dimensions(config),
    )
