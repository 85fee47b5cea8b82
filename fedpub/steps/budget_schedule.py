"""More budget in a few rounds (Ganesh et al. 2023, "Why is public pretraining necessary for
private model training?", Table 2): the rounds in ``boosted_rounds`` use the smaller noise
multiplier ``boosted_noise_multiplier`` (handed to the noise step as the ``noise_multiplier``
output, and declared so: the planned run, which calibration prices, has the boosted rounds); the other rounds
keep the calibrated z, chosen so the composition reaches the target ε. A per-user step that only prepares (the
updates pass unchanged).
"""

from __future__ import annotations

from fedpub.step import EmptyState, Prepared, Releases, Step, user_step
from fedpub.types import Params, RoundContext


def budget_schedule(boosted_rounds: range, boosted_noise_multiplier: float) -> Step:
    """In the rounds of ``boosted_rounds``, the noise step uses ``boosted_noise_multiplier``."""
    if not boosted_noise_multiplier > 0:
        raise ValueError(f"boosted_noise_multiplier must be > 0, got {boosted_noise_multiplier}")

    def prepare(like: Params, state: EmptyState, *, ctx: RoundContext) -> Prepared:
        boosted = ctx.round in boosted_rounds
        outputs = {"noise_multiplier": boosted_noise_multiplier} if boosted else {}
        return Prepared(state, outputs=outputs, metrics={"boosted": float(boosted)})

    def releases(round_index: int) -> Releases:
        return Releases(outputs={"noise_multiplier": boosted_noise_multiplier} if round_index in boosted_rounds else {})

    return user_step(prepare, outputs=("noise_multiplier",), releases=releases)
