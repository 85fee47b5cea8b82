"""Where the randomness that protects users comes from: the server's noise and the private cohorts.

DP holds only if whoever sees the released models cannot predict the noise added to them or which users were
sampled (the amplification by sampling the accountant counts assumes the cohort is secret). Both are drawn from
generators seeded by one **privacy seed**, which is either

* **secret**: 63 bits from the operating system's CSPRNG (:func:`secrets.randbits`), held only in the server's
  memory and in its checkpoint (server-private, like the model before noise). Deployments are secret unless
  their config asks for reproducibility; the drop-in Flower strategy too unless given a seed.
* **reproducible**: a function of the config's ``seed`` and the run's name (so two runs of a sweep never share
  draws: releasing both would cancel the noise), or of ``privacy.draws_key`` in its place, which the arms of a
  comparison share on purpose (common random numbers: the same cohorts and noise streams, so their difference is
  the methods', not the draws'; fedpub issue 45). Anyone holding ``config.yaml`` can rebuild every round's noise
  and cohort: the run is not private against them. Simulations are reproducible by default, and every file that
  reports ε says so.

The randomness that does not protect users (model initialisation, data splits, local training's batch order) stays
a function of the config's seed in every mode.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Literal

from fedpub.seeding import derive_seed

RandomnessSetting = Literal["auto", "secret", "reproducible"]


@dataclass(frozen=True)
class PrivacyRandomness:
    """The privacy seed and whether it is secret."""

    secret: bool
    seed: int

    def statement(self) -> str:
        """One sentence for the run's log, ledger and summary (never the seed itself)."""
        if self.secret:
            return ("secret: the noise and the cohorts are drawn from a seed taken from the operating system's "
                    "CSPRNG, held only by the server (its checkpoint is server-private)")
        return ("reproducible: the noise and the cohorts are a function of the config's seed and the run's name, "
                "so this run is NOT private against anyone holding its config.yaml")

    def to_dict(self) -> dict[str, int | bool]:
        """For the server-private checkpoint only."""
        return {"secret": self.secret, "seed": self.seed}

    @classmethod
    def from_dict(cls, record: dict[str, int | bool]) -> PrivacyRandomness:
        return cls(secret=bool(record["secret"]), seed=int(record["seed"]))


def resolve_randomness(
    setting: RandomnessSetting, *, deployment: bool, config_seed: int, run_name: str, draws_key: str | None = None
) -> PrivacyRandomness:
    """The privacy randomness ``setting`` (``privacy.randomness``) asks for: ``auto`` is secret in a deployment
    and reproducible in a simulation; a secret seed is new on every call. ``draws_key`` (``privacy.draws_key``)
    replaces the run's name in a reproducible seed, so runs of one key share their draws (common random numbers
    between the arms of a comparison); a secret seed refuses it."""
    if setting not in ("auto", "secret", "reproducible"):
        raise ValueError(f"privacy.randomness must be auto, secret or reproducible, got {setting!r}")
    if setting == "secret" or (setting == "auto" and deployment):
        if draws_key is not None:
            raise ValueError("privacy.draws_key shares reproducible draws between runs; this run's randomness is "
                             "secret (privacy.randomness secret, or auto in a deployment): remove privacy.draws_key")
        return PrivacyRandomness(secret=True, seed=secrets.randbits(63))
    return PrivacyRandomness(secret=False, seed=derive_seed(config_seed, draws_key or run_name, "privacy"))
