"""The recipe registry: the one list of the parts a strategy composes (:mod:`fedpub.recipe_spec`), the private mean
they compose around, and the lists derived from them.

The config schema takes the recipe names, the sections each switches on, the steering and public-cohort rules from
here; ``strategies/compose.py`` chains the parts' steps by slot; every transport refuses a part it does not run;
the run summary lists the parts that train public users. Adding a part is its section, its step builders and one
entry in :data:`PARTS` (docs/contributing.md). Light: no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpub.recipe_spec import PHASES, SLOTS, STEERABLE, TRANSPORTS, Part

BASE_RECIPE = "dp_fedavg"
"""The recipe with no part: DP-FedAvg's private mean alone."""

PRIVATE_MEAN: Mapping[str, str] = {
    "clip": "fedpub.strategies.dp_fedavg:clip_steps",
    "aggregate": "fedpub.strategies.dp_fedavg:aggregate_steps",
    "noise": "fedpub.strategies.dp_fedavg:noise_steps",
    "server_opt": "fedpub.strategies.dp_fedavg:server_optimizer_steps",
}
"""DP-FedAvg's steps, which every recipe shares (slot -> builder); a part may replace one (its C_t or its noise)."""

ON_DEVICE: tuple[str, ...] = ("in_process", "distributed", "flower", "flower_strategy", "flower_secagg")
"""Every transport, the secure sum's included: a part whose per-user map (if any) a device can run from the values
it is sent (a run phase runs on the server)."""

PARTS: tuple[Part, ...] = (
    Part(
        "adaptive_clip", steps={"clip": "fedpub.strategies.dp_fedavg:adaptive_clip_steps"},
        steers=frozenset({"clip_norm"}), transports=ON_DEVICE,
    ),
    Part(
        "recenter", recipes=("dope",), trains_public=True, public_geometry=True,
        steps={"recenter": "fedpub.strategies.dope:recenter_steps",
               "add_center": "fedpub.strategies.dope:add_center_steps"}, transports=ON_DEVICE,
    ),
    Part(
        "precondition", recipes=("adadps",), trains_public=True, public_unless=("source", "token_frequency"),
        steps={"precondition": "fedpub.strategies.adadps:preconditioning_steps"}, payloads=("preconditioner",),
        payload_builder="fedpub.strategies.adadps:client_payloads", transports=ON_DEVICE,
    ),
    Part(
        "projection", recipes=("pdp",), trains_public=True, public_geometry=True,
        steps={"project": "fedpub.strategies.projection:project_steps",
               "project_noise": "fedpub.strategies.projection:project_noise_steps"},
        noise_dimensions="fedpub.strategies.projection:noise_dimensions", transports=ON_DEVICE,
    ),
    Part("mirror", recipes=("pda_dpmd",), trains_public=True, public_unless=("public_term", False),
         public_geometry=True, steps={"mirror": "fedpub.strategies.pda_dpmd:mirror_steps"}, transports=ON_DEVICE),
    Part(
        "public_schedule", recipes=("ppsgd",), trains_public=True,
        steps={"clip": "fedpub.strategies.ppsgd:schedule_steps"},
        steers=frozenset({"clip_norm", "noise_multiplier"}), transports=ON_DEVICE,
    ),
    Part(
        "budget_schedule", steps={"budget_schedule": "fedpub.strategies.budget_schedule:budget_schedule_steps"},
        steers=frozenset({"noise_multiplier"}), transports=ON_DEVICE,
    ),
    Part(
        "tree_aggregation", recipes=("dp_ftrl",), steps={"noise": "fedpub.strategies.dp_ftrl:tree_noise_steps"},
        needs_fixed="noises a whole tree with one C and one z", sampling_kind="epoch_blocks",
        sampling_why="needs each user at most once per tree", transports=ON_DEVICE,
    ),
    Part("noise", steps={"noise": "fedpub.strategies.banded_mf:banded_noise_steps"}, transports=ON_DEVICE),
    Part("warm_start", default_in=("pda_dpmd",), trains_public=True, phase="before_rounds", transports=ON_DEVICE),
    Part("model_reuse", recipes=("ppsgd",), trains_public=True, phase="after_rounds", transports=ON_DEVICE),
    Part("model_average", phase="across_rounds", transports=ON_DEVICE),
)
"""Every part, in the order of ``StrategyConfig``'s fields (the recipe names follow it)."""


class RegistryError(ValueError):
    """A declaration that contradicts another or names what does not exist (a slot, a transport, a phase)."""


def _check(parts: tuple[Part, ...]) -> None:
    sections = [p.section for p in parts]
    if len(set(sections)) != len(sections):
        raise RegistryError(f"a part is declared twice: {sections}")
    payloads = [name for p in parts for name in p.payloads]
    if len(set(payloads)) != len(payloads):
        raise RegistryError(f"a client payload is declared by two parts: {payloads}")
    for p in parts:
        unknown = [*(s for s in p.steps if s not in SLOTS), *(t for t in p.transports if t not in TRANSPORTS),
                   *(s for s in p.steers if s not in STEERABLE), *([p.phase] if p.phase not in (None, *PHASES) else [])]
        if unknown:
            raise RegistryError(f"part {p.section!r} names {unknown}; slots: {SLOTS}, transports: {tuple(TRANSPORTS)}, "
                                f"steerable: {STEERABLE}, phases: {PHASES}")
        if (p.phase is None) == (not p.steps):
            raise RegistryError(f"part {p.section!r}: a part adds steps to the chain or is a run phase, not both")
        if BASE_RECIPE in p.recipes + p.default_in:
            raise RegistryError(f"part {p.section!r}: recipe {BASE_RECIPE!r} is the private mean alone")
        refs = [ref for ref in p.steps.values() if ref.count(":") != 1]
        if refs:
            raise RegistryError(f"part {p.section!r}: a builder is 'package.module:attribute', got {refs}")


_check(PARTS)

RECIPE_NAMES: tuple[str, ...] = tuple(dict.fromkeys((BASE_RECIPE, *(r for p in PARTS for r in p.recipes))))
"""Every ``strategy.name``."""
PUBLIC_PARTS: tuple[str, ...] = tuple(p.section for p in PARTS if p.trains_public)
"""The sections that train public users."""
PER_ROUND_PUBLIC: tuple[str, ...] = tuple(
    p.section + ("" if p.public_unless is None else
                 f" (unless {p.public_unless[0]}: {str(p.public_unless[1]).lower()})")
    for p in PARTS if p.trains_public and p.phase is None
)
"""The sections that train public users each round, as a message names them."""


def switched_on(recipe: str) -> tuple[str, ...]:
    """The sections recipe name ``recipe`` switches on."""
    return tuple(p.section for p in PARTS if recipe in p.recipes)


def on_by_default(recipe: str) -> tuple[str, ...]:
    """The sections recipe name ``recipe`` turns on when their key is left out."""
    return tuple(p.section for p in PARTS if recipe in p.default_in)


def _section(strategy: Mapping[str, Any] | object, name: str) -> Any:
    return strategy.get(name) if isinstance(strategy, Mapping) else getattr(strategy, name, None)


def active(strategy: Mapping[str, Any] | object) -> list[Part]:
    """The parts set in ``strategy`` (a ``StrategyConfig`` or its mapping), in registry order."""
    return [p for p in PARTS if _section(strategy, p.section) is not None]


def public_cohort(strategy: Mapping[str, Any] | object) -> list[str]:
    """The sections set in ``strategy`` that train public users each round."""
    def trains(p: Part) -> bool:
        if not p.trains_public or p.phase is not None:
            return False
        if p.public_unless is None:
            return True
        name, value = p.public_unless
        return _section(_section(strategy, p.section), name) != value

    return [p.section for p in active(strategy) if trains(p)]


def in_public_geometry(strategy: Mapping[str, Any] | object) -> list[str]:
    """The sections set in ``strategy`` that combine the public users' updates of each round with the private
    users' in parameter space (:attr:`Part.public_geometry`, while they train public users)."""
    geometric = {p.section for p in PARTS if p.public_geometry}
    return [section for section in public_cohort(strategy) if section in geometric]


def public_phases(strategy: Mapping[str, Any] | object) -> list[str]:
    """The sections set in ``strategy`` that train on the public users in a run phase."""
    return [p.section for p in active(strategy) if p.trains_public and p.phase is not None]


def steering(strategy: Mapping[str, Any] | object) -> list[str]:
    """The sections set in ``strategy`` that steer the round's clip norm or noise multiplier."""
    return [p.section for p in active(strategy) if p.steers]


def supported(transport: str) -> list[str]:
    """The sections ``transport`` runs."""
    return [p.section for p in PARTS if transport in p.transports]


def unsupported(strategy: Mapping[str, Any] | object, transport: str) -> list[str]:
    """The sections set in ``strategy`` that ``transport`` does not run."""
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport {transport!r}; allowed: {', '.join(TRANSPORTS)}")
    return [p.section for p in active(strategy) if transport not in p.transports]


def check_transport(strategy: Mapping[str, Any] | object, transport: str) -> None:
    """Refuse, naming the part and the transport, a ``strategy`` with a part that ``transport`` does not run."""
    refused = unsupported(strategy, transport)
    if refused:
        raise ValueError(
            f"{TRANSPORTS[transport]} does not run strategy.{', strategy.'.join(refused)} (transport `{transport}` "
            f"runs: {', '.join(supported(transport)) or 'no part'}): remove {'it' if len(refused) == 1 else 'them'}"
        )
