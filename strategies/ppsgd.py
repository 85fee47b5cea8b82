"""PPSGD in federated form (Wang & Zhou 2020, "Differentially private learning with small public
data", Alg. 1): each round the public users' mean update steers the next round — when it is small
against the noise (φ‖Δ̄_pub‖ < sqrt(d)·z_t C_t/m) the budget per round grows (z ← z/sqrt(1+α)), when
it is small against the clip (ϕ‖Δ̄_pub‖ < C_t) the clip shrinks (C ← (1−β)C). The rounds' Gaussians
of different z are composed by the PLD/RDP accountant (not the paper's tCDP) and the run stops
before the budget would be exceeded; then the model is reused: fine-tuned on public data with
λ‖w − w_T‖² (``simulations/public_training.py``).
"""

from __future__ import annotations

from fedpub.config import PublicScheduleConfig
from fedpub.step import Step
from fedpub.steps.public_schedule import public_schedule


def schedule_step(config: PublicScheduleConfig, clip_norm: float, noise_multiplier: float) -> Step:
    """The step that clips to C_t, hands z_t to the noise and sets (C_{t+1}, z_{t+1})."""
    return public_schedule(
        clip_norm,
        noise_multiplier,
        budget_growth=config.budget_growth,
        clip_decay=config.clip_decay,
        noise_test_factor=config.noise_test_factor,
        clip_test_factor=config.clip_test_factor,
        min_noise_multiplier=config.min_noise_multiplier,
    )
