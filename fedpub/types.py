"""Shared types of the core: parameter trees, a step's state and the frozen round context."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

Params = dict[str, torch.Tensor]
"""Model parameters by name (a flat tensor dict)."""

Updates = dict[str, torch.Tensor]
"""One update (same keys and shapes as the parameters)."""

StepState = Mapping[str, Any]
"""A step's state: a dict of tensors, Python scalars and nested dicts, saved by ``torch.save`` in checkpoints and
read back by torch's weights-only loader (no other objects: numpy values, dataclasses). Each step types its own (a
``TypedDict``, e.g. :class:`~fedpub.steps.clip.ClipState`); a chain's is a dict of its steps' states by name."""


ROUND_INPUTS: Mapping[str, str] = MappingProxyType(
    {
        "public_mean": "the mean of the round's usable public updates (None when there is none)",
        "public_updates": "the round's usable public updates, a Cohort (maybe of no rows)",
    }
)
"""The keyword inputs every round gives the server steps, with what they hold (besides the private updates and
the :class:`RoundContext`): :meth:`~fedpub.strategy.StrategyCore.aggregate` provides them, and a chain's steps
may read them (:func:`~fedpub.step.named_chain`)."""


@dataclass(frozen=True)
class RoundContext:
    """What a server step may know about the round, declared once and never mutated.

    ``population`` is the number of *private* users N and ``expected_cohort`` the expected private
    cohort m = qN (Poisson) or the fixed cohort size; both come from the dataset and the config,
    never from how many clients happened to reply.
    """

    round: int
    seed: int
    population: int
    sampling_rate: float
    expected_cohort: float
    cohort_size: int
    num_public: int = 0
