"""What a recipe part declares to fedpub: its config section, the recipe names that switch it on, its steps' slots
in the chain and their builders, whether it trains public users, what it steers, its client payloads, its run
phase and the transports that run it.

A declaration is plain data: its step builders are references ``"package.module:attribute"`` that
``strategies/compose.py`` imports on first use, so the config schema, which reads the declarations, loads no torch
(``tests/test_layers.py``). :mod:`fedpub.recipe_registry` lists the declared parts; nothing else in fedpub names
one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

SLOTS: tuple[str, ...] = (
    "precondition", "recenter", "project", "budget_schedule", "clip", "aggregate", "noise", "project_noise",
    "add_center", "mirror", "server_opt",
)
"""The chain's order (docs/design.md §3): a step's slot is also its name in the chain and in the strategy's state."""

STEERABLE: tuple[str, ...] = ("clip_norm", "noise_multiplier")
"""What a part may steer round by round (the private mean's C_t and z_t)."""

PHASES: tuple[str, ...] = ("before_rounds", "across_rounds", "after_rounds")
"""When a part that adds no step runs: before the first round (warm start), over the rounds' global models (model
average), after the last round (model reuse)."""

TRANSPORTS: Mapping[str, str] = {
    "in_process": "the in-process engine (fedpub run --backend inprocess)",
    "flower": "fedpub's Flower ServerApp (fedpub run --backend flower, flwr run .)",
    "flower_strategy": "FedpubStrategy.from_config in your own ServerApp",
    "flower_secagg": "the SecAgg+ transport (python -m fedpub.simulations.flower.secagg_dp)",
    "distributed": "the round on many workers (torchrun ... -m fedpub.simulations run)",
}
"""Where a recipe runs, in words. A transport refuses, when the run is built, a config with a part that does not
list it."""


@dataclass(frozen=True)
class Part:
    """One optional section of ``strategy:`` and what it adds to the recipe."""

    section: str
    """Its field of :class:`fedpub.config.StrategyConfig` (the section's pydantic model is that field's type)."""
    recipes: tuple[str, ...] = ()
    """The ``strategy.name`` values that switch it on (with its defaults when left out or null): what they are."""
    default_in: tuple[str, ...] = ()
    """The ``strategy.name`` values that turn it on by default when the key is left out (an explicit ``null`` turns
    it off; a resolved config writes the null, so it reads back the same)."""
    steps: Mapping[str, str] = field(default_factory=dict)
    """Its steps: slot (of :data:`SLOTS`) -> reference to ``(BuildContext) -> list[tuple[str, Step]]``. A slot of
    the private mean (:data:`fedpub.recipe_registry.PRIVATE_MEAN`) is replaced, any other is added."""
    trains_public: bool = False
    """It trains public users: each round (a public cohort, ``public_clients_per_round`` 10 by default and never
    0), or, with a ``phase``, in its phase on the pooled public data."""
    public_unless: tuple[str, str | bool] | None = None
    """(field, value) of its section with which it trains no public users (AdaDPS's ``source: token_frequency``,
    PDA-DPMD's ``public_term: false``)."""
    public_geometry: bool = False
    """It combines the public users' updates with the private users' in parameter space (a center, a mirror mix, a
    subspace), so the public users must train in the private users' geometry: a client-side preconditioner of
    public statistics (which public users train without) is refused beside it, while it trains public users."""
    phase: str | None = None
    """The run phase it is (of :data:`PHASES`), outside the rounds' chain; None for a part of the chain."""
    steers: frozenset[str] = frozenset()
    """What it sets round by round (of :data:`STEERABLE`); one part at most steers."""
    needs_fixed: str | None = None
    """Why it needs C and z fixed (no part may steer them), in words; None when it does not."""
    sampling_kind: str | None = None
    """The ``sampling.kind`` it needs (the default while it is on; another is refused), and ``sampling_why``."""
    sampling_why: str = ""
    payloads: tuple[str, ...] = ()
    """What it may send the clients besides the model (their names in a TRAIN message)."""
    payload_builder: str | None = None
    """Reference to ``(section config) -> tuple[ClientPayload, ...]``: the payloads a config of the section sends
    (named in :attr:`payloads`), resolved lazily like :attr:`steps`."""
    noise_dimensions: str | None = None
    """Reference to ``(section config) -> int | None``: how many dimensions the released noise lies in when the
    part confines it (the public subspace's k), None for the model's d; resolved when a strategy is built."""
    transports: tuple[str, ...] = ("in_process", "distributed", "flower", "flower_strategy")
    """The transports (of :data:`TRANSPORTS`) that run it: an allowlist."""
