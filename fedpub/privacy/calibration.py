"""The noise multiplier that reaches a target (epsilon, delta) over a planned run, cached on disk.

The run is given as a function z ↦ its planned DpEvent (every round composed), which a strategy builds from
its steps' declared releases (``fedpub.step``): constant rounds of user-level DP-FedAvg's sampled Gaussian
(McMahan et al. 2018, see ``events.py``), rounds that spend more budget at a fixed z or a ratio of z ("Why
is public pretraining necessary for private model training?", Table 2), an adaptive clip's count noise,
DP-FTRL's tree aggregation paid once per tree (Kairouz et al. 2021), ... The search is dp-accounting's
``calibrate_dp_mechanism`` (Brent's method, then a check that the returned z meets the target) on the smallest
z for which ``planned(z)`` costs at most the target. RDP is bracketed from [0.05, 1.0] upwards (z = 0 would
divide by zero for fixed-size sampling). PLD is slow and memory-hungry at small z, so its bracket is found by
stepping from the RDP answer, near which the PLD answer lies (from 1 when RDP, which overstates some releases,
cannot reach the target at any z).

The cache key holds the planned event at a few probe multipliers (``KEY_PROBES``): its structure and how it
moves with z (constant, fixed or proportional noise), so two plans share an entry only when they are the
same function of z in every plan fedpub builds; and the fedpub and dp-accounting versions. The cache is a file
anyone can edit, so a cached z is re-priced before use (one accountant call: the plan at z must cost at most the
target, as the search guarantees); an entry that does not (edited, or stale) is recomputed and rewritten, with a
warning. A cached z above the smallest one costs less than the target: it is used as it is.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import warnings
from collections.abc import Callable
from numbers import Real
from pathlib import Path

import dp_accounting
from dp_accounting import dp_event

from fedpub import __version__ as fedpub_version
from fedpub.atomic import write_json_atomic
from fedpub.privacy.accountant import AccountantKind, PrivacyBudget, UserLevelAccountant, make_dp_accountant
from fedpub.privacy.errors import PrivacyError
from fedpub.privacy.events import CohortRule, NeighboringRelation, event_to_dict, neighboring_relation, run_event

PlannedEvent = Callable[[float], dp_event.DpEvent]
"""z ↦ the DpEvent of a whole planned run whose noise steps use noise multiplier z."""

MIN_NOISE_MULTIPLIER = 0.05
"""The smallest z calibrated; a target that a smaller z would already reach is refused."""
MAX_NOISE_MULTIPLIER = 1000.0
"""The largest z calibrated: a plan that spends the target even there is refused (what it spends is then the
releases whose noise does not move with z). Above it the accountants lose precision (RDP of sampling without
replacement fails from about 1e6)."""
KEY_PROBES = (1.0, math.pi)
"""The noise multipliers at which the planned event is written into the cache key."""
_TOL = 1e-5  # absolute tolerance on z
_PLD_STEP = 0.8  # factor between successive PLD bracket probes below the RDP answer
CACHE_FILE = "calibration.json"


def default_cache_dir() -> Path:
    """``$FEDPUB_CACHE_DIR``, or ``~/.cache/fedpub``."""
    return Path(os.environ.get("FEDPUB_CACHE_DIR") or Path.home() / ".cache" / "fedpub")


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sampling: CohortRule,
    rounds: int,
    accountant: AccountantKind = "pld",
    cache_dir: Path | None = None,
    *,
    pld_discretization: float = 1e-4,
) -> float:
    """The smallest noise multiplier z (to within 1e-5) whose ``rounds`` rounds, each one Gaussian release on
    ``sampling``'s cohort (amplified as the rule says for each round: :func:`~fedpub.privacy.events.run_event`),
    cost at most ``target_epsilon`` at ``delta`` (cached, see :func:`calibrate`)."""

    def planned(z: float) -> dp_event.DpEvent:
        return run_event(sampling, [dp_event.GaussianDpEvent(z)], rounds)

    return calibrate(
        planned, neighboring_relation(sampling), target_epsilon, delta, accountant, cache_dir,
        pld_discretization=pld_discretization,
    )


def calibrate(
    planned: PlannedEvent,
    relation: NeighboringRelation,
    target_epsilon: float,
    delta: float,
    accountant: AccountantKind = "pld",
    cache_dir: Path | None = None,
    *,
    pld_discretization: float = 1e-4,
) -> float:
    """The smallest noise multiplier z (to within 1e-5) for which the run ``planned(z)`` costs at most
    ``target_epsilon`` at ``delta`` under ``relation`` neighbours; results are cached in
    ``cache_dir/calibration.json``. Raises a PrivacyError when ``accountant`` cannot price the run, or when no
    z in [0.05, 1000] reaches the target (a target weaker than z = 0.05 spends, or releases whose noise does not
    move with z that alone spend it)."""
    eps = target_epsilon
    if isinstance(eps, bool) or not isinstance(eps, Real) or not 0 < eps < math.inf:
        raise PrivacyError(f"target_epsilon must be a finite number > 0, got {target_epsilon!r}")
    PrivacyBudget(target_epsilon, delta)  # validates delta
    UserLevelAccountant(accountant, relation, pld_discretization).check_supported(planned(1.0))

    key = json.dumps(
        {
            "accountant": accountant,
            "neighboring_relation": relation.name,
            "planned": [event_to_dict(planned(z)) for z in KEY_PROBES],
            "target_epsilon": float(target_epsilon),
            "delta": float(delta),
            "pld_discretization": float(pld_discretization),
            "tolerance": _TOL,
            "dp_accounting": importlib.metadata.version("dp-accounting"),
            "fedpub": fedpub_version,
        },
        sort_keys=True,
    )

    def fresh(kind: AccountantKind) -> Callable[[], dp_accounting.PrivacyAccountant]:
        return lambda: make_dp_accountant(kind, relation, pld_discretization)

    def spent(kind: AccountantKind, event: dp_event.DpEvent) -> float:
        return fresh(kind)().compose(event).get_epsilon(delta)

    path = (default_cache_dir() if cache_dir is None else Path(cache_dir)) / CACHE_FILE
    entries = read_cache(path)
    if key in entries:
        cached = entries[key]
        if not _is_multiplier(cached):
            warnings.warn(f"calibration cache {path}: its entry for this plan is not a noise multiplier in "
                          f"[{MIN_NOISE_MULTIPLIER}, {MAX_NOISE_MULTIPLIER:g}] ({cached!r}); recomputing", stacklevel=2)
        elif (cost := spent(accountant, planned(cached))) <= target_epsilon:
            return cached
        else:
            warnings.warn(f"calibration cache {path}: its entry for this plan, z = {cached:g}, spends epsilon={cost:g} "
                          f"> target_epsilon={target_epsilon:g} at delta={delta:g} ({accountant} accountant); "
                          "recomputing", stacklevel=2)

    def gap(kind: AccountantKind, z: float) -> float:
        return spent(kind, planned(z)) - target_epsilon

    def solve(kind: AccountantKind, bracket: dp_accounting.mechanism_calibration.BracketInterval) -> float:
        return float(dp_accounting.calibrate_dp_mechanism(
            fresh(kind), planned, target_epsilon, delta, bracket_interval=bracket, tol=_TOL
        ))

    if (fixed := spent(accountant, planned(MAX_NOISE_MULTIPLIER))) >= target_epsilon:
        raise PrivacyError(
            f"even at noise multiplier {MAX_NOISE_MULTIPLIER:g} the run spends epsilon={fixed:g}, at least "
            f"target_epsilon={target_epsilon:g} at delta={delta:g} ({accountant} accountant): the releases whose "
            "noise does not move with the calibrated multiplier (rounds at a fixed z, a noisy count) alone "
            "already spend it"
        )
    if gap("rdp", MIN_NOISE_MULTIPLIER) <= 0:
        raise PrivacyError(_too_weak(target_epsilon, delta, "rdp"))
    try:
        z = solve("rdp", dp_accounting.LowerEndpointAndGuess(MIN_NOISE_MULTIPLIER, 1.0))
    except dp_accounting.mechanism_calibration.NoBracketIntervalFoundError:
        z = 1.0  # RDP overstates some releases beyond the target; PLD, which does not, brackets from 1
    if accountant == "pld":
        z = solve("pld", _bracket_below(lambda x: gap("pld", x), z, target_epsilon, delta))
    entries[key] = z
    write_cache(path, entries)
    return z


def _is_multiplier(value: object) -> bool:
    """Whether a cache entry is a noise multiplier the search could have returned."""
    return type(value) is float and MIN_NOISE_MULTIPLIER <= value <= MAX_NOISE_MULTIPLIER


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


def write_cache(path: Path, entries: dict[str, object], what: str = "calibration") -> None:
    """Write the entries of the JSON cache file ``path`` (``what``'s) atomically; a cache that cannot be written
    is said in a warning, and the run goes on without it."""
    try:
        write_json_atomic(path, entries)
    except OSError as err:
        warnings.warn(f"could not write {what} cache {path}: {err}", stacklevel=3)


def read_cache(path: Path, what: str = "calibration") -> dict[str, object]:
    """The entries of the JSON cache file ``path`` (``what``'s, named in a warning); a missing file is empty, a
    corrupt one is ignored with a warning."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        warnings.warn(f"ignoring unreadable {what} cache {path}: {err}", stacklevel=3)
        return {}
    if not isinstance(entries, dict):
        warnings.warn(f"ignoring {what} cache {path}: it is not a JSON object", stacklevel=3)
        return {}
    return entries
