"""Epsilon of a grouped ledger, reusing each distinct round event's privacy curve.

dp-accounting rebuilds a round event's privacy curve every time an accountant composes it: for a Poisson-sampled
Gaussian that is about 0.3–0.7 s (PLD) or 0.4 s (RDP, sampling without replacement) on a laptop core, paid
twice a round by a run that reports ε each round. The curve of one repetition does not change, so it is built
once (by a dp-accounting accountant composing the event once) and kept; ``count`` repetitions are then its
self-composition (PLD, by FFT, as dp-accounting composes a ``SelfComposedDpEvent``) or ``count`` times its RDP
vector (RDP is additive). The result equals a fresh dp-accounting accountant's (tests check it).

This reads two attributes dp-accounting keeps private (``PLDAccountant._pld``, ``RdpAccountant._rdp``);
the version range pinned in pyproject (0.6.x) has both.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import dp_accounting
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

CACHE_SIZE = 64
"""Distinct (accountant, event) curves kept; a run with a fixed z needs one, PPSGD one per round."""

_curves: OrderedDict[tuple[Any, ...], Any] = OrderedDict()


def clear_cache() -> None:
    """Forget every built curve (the next evaluation of each event is cold again)."""
    _curves.clear()


def grouped_epsilon(
    new_accountant: Callable[[], dp_accounting.PrivacyAccountant],
    setting: Hashable,
    groups: Sequence[tuple[dp_event.DpEvent, int]],
    delta: float,
) -> float:
    """Epsilon at ``delta`` of ``count`` repetitions of each ``event`` in ``groups``, composed in order.

    ``new_accountant`` makes an empty dp-accounting ``PLDAccountant`` or ``RdpAccountant`` (the run's
    neighbouring relation and discretization), which ``setting`` names for the cache."""
    probe = new_accountant()
    if isinstance(probe, rdp_privacy_accountant.RdpAccountant):
        total = sum(count * _curve(new_accountant, setting, event) for event, count in groups)
        return float(rdp_privacy_accountant.compute_epsilon(probe._orders, total, delta)[0])
    composed = None
    for event, count in groups:
        curve = _curve(new_accountant, setting, event)
        if curve is None:  # a non-private round
            return float("inf")
        repeated = curve if count == 1 else curve.self_compose(count)
        composed = repeated if composed is None else composed.compose(repeated)
    return float(composed.get_epsilon_for_delta(delta))


def _curve(
    new_accountant: Callable[[], dp_accounting.PrivacyAccountant], setting: Hashable, event: dp_event.DpEvent
) -> Any:
    """The event's RDP vector, or its PLD (``None`` for a non-private event), built once."""
    key = (setting, repr(event))
    if key in _curves:
        _curves.move_to_end(key)
        return _curves[key]
    accountant = new_accountant()
    accountant.compose(event)
    if isinstance(accountant, rdp_privacy_accountant.RdpAccountant):
        curve = accountant._rdp
    else:
        curve = None if accountant._contains_non_dp_event else accountant._pld
    _curves[key] = curve
    if len(_curves) > CACHE_SIZE:
        _curves.popitem(last=False)
    return curve
