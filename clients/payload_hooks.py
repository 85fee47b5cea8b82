"""How local training applies a round's client payloads (:mod:`fedpub.payloads`): one hook per payload name.

A hook takes the payload's tensors and the :class:`LocalAdjustment` made of the payloads before it, and returns the
adjustment with its own added. The adjustment is what local SGD reads each step (one user's loop,
:func:`~fedpub.clients.local_training.train_client`, and the vectorised cohort trainer alike): so far, the element-wise
divisors of the gradients. ``preconditioner`` (AdaDPS's client placement, Li et al. 2023, Alg. 3) divides each local
gradient by A.

A payload without a hook is refused, never ignored: :func:`check_strategy_payloads` when a run is built (the
in-process engine, fedpub's ServerApp and ClientApps), :func:`local_adjustment` when a client is sent one (a Flower
node then fails the message, naming the payload). A new payload adds its hook to :data:`PAYLOAD_HOOKS` (and, when it changes local
training in a way the adjustment cannot say yet, a field of :class:`LocalAdjustment` that local SGD reads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from fedpub.payloads import Payloads
from fedpub.strategy import StrategyCore
from fedpub.types import Updates


@dataclass(frozen=True)
class LocalAdjustment:
    """What the payloads change in a user's local SGD: each gradient is divided element-wise by its ``divisors``
    entry (by parameter name) before the step."""

    divisors: Updates = field(default_factory=dict)


PayloadHook = Callable[[Updates, LocalAdjustment], LocalAdjustment]
"""``hook(tensors, adjustment)``: the adjustment with the payload ``tensors`` applied."""


class UnknownPayload(ValueError):
    """A payload no hook applies: training without it would be another mechanism than the recipe's."""


def divide_gradients(tensors: Updates, adjustment: LocalAdjustment) -> LocalAdjustment:
    """Divide each local gradient by ``tensors`` (AdaDPS's A), element-wise."""
    shared = sorted(tensors.keys() & adjustment.divisors.keys())
    if shared:
        raise ValueError(f"two payloads divide the gradients of {shared[:3]}")
    return replace(adjustment, divisors={**adjustment.divisors, **tensors})


PAYLOAD_HOOKS: Mapping[str, PayloadHook] = {"preconditioner": divide_gradients}
"""The payloads local training can apply, by name."""


def check_payload_names(names: Iterable[str], *, where: str) -> None:
    """Refuse payload names without a hook; ``where`` says who would be sent them (e.g. "strategy `adadps`'s
    public clients")."""
    unknown = sorted(set(names) - PAYLOAD_HOOKS.keys())
    if unknown:
        raise UnknownPayload(
            f"{where} would be sent the payloads {unknown}, which local training cannot apply (known: "
            f"{sorted(PAYLOAD_HOOKS)}): register a hook in clients/payload_hooks.py"
        )


def check_strategy_payloads(core: StrategyCore) -> None:
    """Refuse, when a run is built, a strategy that would send its private or public clients a payload local
    training cannot apply."""
    check_payload_names(core.payload_names(), where=f"strategy `{core.name}`'s private clients")
    check_payload_names(core.payload_names(public=True), where=f"strategy `{core.name}`'s public clients")


def local_adjustment(payloads: Payloads) -> LocalAdjustment:
    """The adjustment of local SGD the ``payloads`` make, each applied by its hook; :class:`UnknownPayload` for one
    without a hook."""
    check_payload_names(payloads, where="this client")
    adjustment = LocalAdjustment()
    for name, tensors in payloads.items():
        adjustment = PAYLOAD_HOOKS[name](tensors, adjustment)
    return adjustment
