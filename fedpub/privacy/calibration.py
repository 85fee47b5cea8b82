"""The noise multiplier that reaches a target (epsilon, delta) after T identical rounds, cached on disk.

Optionally k of the T rounds are *boosted*: they use a fixed noise multiplier z_b (more budget in some
rounds, e.g. early ones: "Why is public pretraining necessary for private model training?", Table 2) and
the calibrated z applies to the other T − k rounds.

The round is user-level DP-FedAvg's sampled Gaussian (McMahan et al. 2018), see ``events.py``; the
search is dp-accounting's ``calibrate_dp_mechanism`` (Brent's method, then a check that the returned
z meets the target). RDP is bracketed from [0.05, 1.0] upwards (z = 0 would divide by zero for
fixed-size sampling). PLD is slow and memory-hungry at small z, so its bracket is found by stepping
from the RDP answer, near which the PLD answer lies.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
import os
import warnings
from collections.abc import Callable
from numbers import Integral, Real
from pathlib import Path

import dp_accounting
from dp_accounting import dp_event

from fedpub.privacy.accountant import AccountantKind, PrivacyBudget, UserLevelAccountant, make_dp_accountant
from fedpub.privacy.errors import PrivacyError
from fedpub.privacy.events import Sampling, neighboring_relation, round_event
from fedpub.atomic import write_json_atomic

MIN_NOISE_MULTIPLIER = 0.05
"""The smallest z calibrated; a target that a smaller z would already reach is refused."""
_TOL = 1e-5  # absolute tolerance on z
_PLD_STEP = 0.8  # factor between successive PLD bracket probes below the RDP answer
CACHE_FILE = "calibration.json"


def default_cache_dir() -> Path:
    """``$FEDPUB_CACHE_DIR``, or ``~/.cache/fedpub``."""
    return Path(os.environ.get("FEDPUB_CACHE_DIR") or Path.home() / ".cache" / "fedpub")


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sampling: Sampling,
    rounds: int,
    accountant: AccountantKind = "pld",
    cache_dir: Path | None = None,
    *,
    pld_discretization: float = 1e-4,
    boosted: tuple[int, float] | None = None,
    boosted_ratio: tuple[int, float] | None = None,
) -> float:
    """The smallest noise multiplier z (to within 1e-5) whose ``rounds`` rounds cost at most
    ``target_epsilon`` at ``delta``; results are cached in ``cache_dir/calibration.json``.

    ``boosted = (k, z_b)``: k of the rounds use noise multiplier z_b and z is for the other rounds − k;
    ``boosted_ratio = (k, r)``: k of the rounds use r·z."""
    eps = target_epsilon
    if isinstance(eps, bool) or not isinstance(eps, Real) or not 0 < eps < math.inf:
        raise PrivacyError(f"target_epsilon must be a finite number > 0, got {target_epsilon!r}")
    PrivacyBudget(target_epsilon, delta)  # validates delta
    if isinstance(rounds, bool) or not isinstance(rounds, Integral) or rounds < 1:
        raise PrivacyError(f"rounds must be an integer >= 1, got {rounds!r}")
    if boosted is not None and boosted_ratio is not None:
        raise PrivacyError("give boosted or boosted_ratio, not both")
    if boosted is not None:
        _check_boost(boosted, rounds, "boosted noise multiplier")
    if boosted_ratio is not None:
        _check_boost(boosted_ratio, rounds, "boosted noise ratio")
    relation = neighboring_relation(sampling)
    UserLevelAccountant(accountant, relation, pld_discretization).check_supported(
        round_event(sampling, [dp_event.GaussianDpEvent(1.0)])
    )

    key = json.dumps(
        {
            "accountant": accountant,
            "sampling": {"kind": type(sampling).__name__, **dataclasses.asdict(sampling)},
            "rounds": int(rounds),
            "target_epsilon": float(target_epsilon),
            "delta": float(delta),
            "pld_discretization": float(pld_discretization),
            "boosted": None if boosted is None else [int(boosted[0]), float(boosted[1])],
            "boosted_ratio": None if boosted_ratio is None else [int(boosted_ratio[0]), float(boosted_ratio[1])],
            "tolerance": _TOL,
            "dp_accounting": importlib.metadata.version("dp-accounting"),
        },
        sort_keys=True,
    )
    path = (default_cache_dir() if cache_dir is None else Path(cache_dir)) / CACHE_FILE
    entries = _read_cache(path)
    if isinstance(entries.get(key), float):
        return entries[key]

    def rounds_at(z: float, count: int) -> dp_event.DpEvent:
        return dp_event.SelfComposedDpEvent(round_event(sampling, [dp_event.GaussianDpEvent(z)]), int(count))

    boost = None if boosted is None else rounds_at(boosted[1], boosted[0])
    boosted_count = next((b[0] for b in (boosted, boosted_ratio) if b is not None), 0)

    def boosted_z(z: float) -> float:
        return boosted[1] if boosted is not None else boosted_ratio[1] * z

    def make_event(z: float) -> dp_event.DpEvent:
        regular = rounds_at(z, rounds - boosted_count)
        if not boosted_count:
            return regular
        return dp_event.ComposedDpEvent([rounds_at(boosted_z(z), boosted_count), regular])

    def fresh(kind: AccountantKind) -> Callable[[], dp_accounting.PrivacyAccountant]:
        return lambda: make_dp_accountant(kind, relation, pld_discretization)

    def gap(kind: AccountantKind, z: float) -> float:
        return fresh(kind)().compose(make_event(z)).get_epsilon(delta) - target_epsilon

    def solve(kind: AccountantKind, bracket: dp_accounting.mechanism_calibration.BracketInterval) -> float:
        return float(dp_accounting.calibrate_dp_mechanism(
            fresh(kind), make_event, target_epsilon, delta, bracket_interval=bracket, tol=_TOL
        ))

    if boost is not None and (spent := fresh(accountant)().compose(boost).get_epsilon(delta)) >= target_epsilon:
        raise PrivacyError(
            f"the {boosted[0]} boosted rounds at noise multiplier {boosted[1]:g} alone already spend epsilon="
            f"{spent:g}, at least target_epsilon={target_epsilon:g} at delta={delta:g} ({accountant} accountant)"
        )
    if gap("rdp", MIN_NOISE_MULTIPLIER) <= 0:
        raise PrivacyError(_too_weak(target_epsilon, delta, "rdp"))
    try:
        z = solve("rdp", dp_accounting.LowerEndpointAndGuess(MIN_NOISE_MULTIPLIER, 1.0))
    except dp_accounting.mechanism_calibration.NoBracketIntervalFoundError as err:
        if boost is None or accountant == "rdp":
            raise PrivacyError(
                f"target_epsilon={target_epsilon:g} at delta={delta:g} is out of reach: "
                "no noise multiplier up to 2^30 reaches it"
            ) from err
        z = 1.0  # RDP overstates the boosted rounds beyond the target; PLD, which does not, brackets from 1
    if accountant == "pld":
        z = solve("pld", _bracket_below(lambda x: gap("pld", x), z, target_epsilon, delta))
    entries[key] = z
    try:
        write_json_atomic(path, entries)
    except OSError as err:
        warnings.warn(f"could not write calibration cache {path}: {err}", stacklevel=2)
    return z


def _check_boost(boost: tuple[int, float], rounds: int, what: str) -> None:
    """(k, value): 0 < k < rounds boosted rounds and a finite value > 0."""
    k, value = boost
    if isinstance(k, bool) or not isinstance(k, Integral) or not 0 < k < rounds:
        raise PrivacyError(f"boosted rounds k must be an integer with 0 < k < rounds={rounds}, got {k!r}")
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 < value < math.inf:
        raise PrivacyError(f"the {what} must be a finite number > 0, got {value!r}")


def _bracket_below(
    epsilon_gap: Callable[[float], float], guess: float, target_epsilon: float, delta: float
) -> dp_accounting.ExplicitBracketInterval:
    """An interval (lower, upper) with epsilon_gap(lower) > 0 >= epsilon_gap(upper), found by stepping
    geometrically from ``guess`` (up by doubling, then down by ``_PLD_STEP``)."""
    upper = guess
    while epsilon_gap(upper) > 0:
        upper *= 2
    while True:
        lower = max(upper * _PLD_STEP, MIN_NOISE_MULTIPLIER)
        if epsilon_gap(lower) > 0:
            return dp_accounting.ExplicitBracketInterval(lower, upper)
        if lower == MIN_NOISE_MULTIPLIER:
            raise PrivacyError(_too_weak(target_epsilon, delta, "pld"))
        upper = lower


def _too_weak(target_epsilon: float, delta: float, accountant: str) -> str:
    return (
        f"target_epsilon={target_epsilon:g} at delta={delta:g} is so weak that a noise multiplier below "
        f"{MIN_NOISE_MULTIPLIER} already reaches it ({accountant} accountant); ask for a smaller epsilon"
    )


def _read_cache(path: Path) -> dict[str, object]:
    """The cache file's entries; a missing file is empty, a corrupt one is ignored with a warning."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        warnings.warn(f"ignoring unreadable calibration cache {path}: {err}", stacklevel=3)
        return {}
    if not isinstance(entries, dict):
        warnings.warn(f"ignoring calibration cache {path}: it is not a JSON object", stacklevel=3)
        return {}
    return entries
