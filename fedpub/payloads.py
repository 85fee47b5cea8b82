"""Client payloads: what a round sends its clients besides the global model (docs/design.md §3).

A recipe part declares each payload it sends as a :class:`ClientPayload`: a name, a function from the strategy
state to named tensors (None: nothing to send this round), and which clients get it, the private cohort, the public
one or both. :class:`~fedpub.strategy.StrategyCore` computes a round's payloads from its state
(:meth:`~fedpub.strategy.StrategyCore.payloads`), the round plan carries them by name, each transport delivers
them under their names (the Flower message protocol: :mod:`fedpub.protocol`), and local training applies each
with the hook registered under its name (``clients/payload_hooks.py``). A client that cannot apply a payload
says so instead of training without it, and a reply that does not say it applied every payload it was sent is
refused: training without a payload is another mechanism than the one the recipe declares.

AdaDPS's client placement (Li et al. 2023, Alg. 3) is the first payload: ``preconditioner``, the A each local
gradient is divided by.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fedpub.types import StepState, Updates

Payloads = Mapping[str, Updates]
"""A round's payloads for one kind of client: payload name → its named tensors."""


@dataclass(frozen=True)
class ClientPayload:
    """A payload named ``name``: ``tensors(state)`` from the strategy (chain) state, None when the round sends
    nothing (e.g. before the statistics it is made of exist); sent to the private cohort when ``private``, to the
    public cohort when ``public``."""

    name: str
    tensors: Callable[[StepState], Updates | None]
    private: bool = True
    public: bool = False

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"a payload name must be letters, digits and underscores, got {self.name!r}")


def round_payloads(declared: Sequence[ClientPayload], state: StepState, *, public: bool) -> dict[str, Updates]:
    """The payloads the private (or ``public``) clients of a round are sent, from the strategy ``state``."""
    payloads = {}
    for payload in declared:
        if payload.public if public else payload.private:
            tensors = payload.tensors(state)
            if tensors is not None:
                payloads[payload.name] = tensors
    return payloads


def check_declared(declared: Sequence[ClientPayload]) -> None:
    """Refuse two payloads of one name (a client could not tell which it applied)."""
    names = [p.name for p in declared]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"client payloads {twice} are declared more than once")


def payload_names(declared: Sequence[ClientPayload], *, public: bool) -> tuple[str, ...]:
    """The names of the payloads the private (or ``public``) clients may be sent."""
    return tuple(p.name for p in declared if (p.public if public else p.private))
