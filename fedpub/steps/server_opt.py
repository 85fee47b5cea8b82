"""Server optimizers applied to the (private) average update Δ̄, which points downhill.

SGD with momentum gives DP-FedAvgM and Adam gives DP-FedAdam (Reddi et al. 2021, "Adaptive
federated optimization"); both are post-processing of the noisy average and cost no privacy.
The step's output is the increment to add to the global parameters.
"""

from __future__ import annotations

from typing import TypedDict

import torch

from fedpub import tree
from fedpub.step import EmptyState, Step, StepResult, after_sum_step
from fedpub.types import Params, RoundContext, Updates


class MomentumState(TypedDict):
    """The server SGD's velocity v."""

    velocity: Updates


class AdamState(TypedDict):
    """Adam's first and second moments and its step count."""

    m: Updates
    v: Updates
    count: int


def server_sgd(lr: float, momentum: float = 0.0) -> Step:
    """w ← w + lr·v with v ← momentum·v + Δ̄ (plain FedAvg for lr=1, momentum=0; without momentum, stateless)."""
    if not lr > 0 or not 0 <= momentum < 1:
        raise ValueError(f"server SGD needs lr > 0 and 0 <= momentum < 1, got {lr}, {momentum}")

    def plain(updates: Updates, state: EmptyState, *, ctx: RoundContext) -> StepResult:
        # lr = 1 (FedAvg) hands the average on as it is: ×1.0 would copy the whole model to change nothing
        return StepResult(dict(updates) if lr == 1.0 else tree.scale(updates, lr), state)

    def init(params: Params) -> MomentumState:
        return MomentumState(velocity=tree.zeros_like(params))

    def update(updates: Updates, state: MomentumState, *, ctx: RoundContext) -> StepResult:
        velocity = tree.add(tree.scale(state["velocity"], momentum), updates)
        return StepResult(tree.scale(velocity, lr), MomentumState(velocity=velocity))

    return after_sum_step(update, init=init) if momentum else after_sum_step(plain)


def server_adam(lr: float, beta1: float = 0.9, beta2: float = 0.99, eps: float = 1e-3) -> Step:
    """Adam on the pseudo-gradient −Δ̄ (FedAdam; ``eps`` is the adaptivity τ of Reddi et al.)."""
    if not lr > 0 or not 0 <= beta1 < 1 or not 0 <= beta2 < 1 or not eps > 0:
        raise ValueError(f"server Adam needs lr>0, 0<=beta<1, eps>0; got {lr}, {beta1}, {beta2}, {eps}")

    def init(params: Params) -> AdamState:
        return AdamState(m=tree.zeros_like(params), v=tree.zeros_like(params), count=0)

    def update(updates: Updates, state: AdamState, *, ctx: RoundContext) -> StepResult:
        count = state["count"] + 1
        grad = tree.scale(updates, -1.0)
        m = {k: beta1 * state["m"][k] + (1 - beta1) * g for k, g in grad.items()}
        v = {k: beta2 * state["v"][k] + (1 - beta2) * g * g for k, g in grad.items()}
        bias1, bias2 = 1 - beta1**count, 1 - beta2**count
        increment = {
            k: -lr * (m[k] / bias1) / (torch.sqrt(v[k] / bias2) + eps) for k in grad
        }
        return StepResult(increment, AdamState(m=m, v=v, count=count))

    return after_sum_step(update, init=init)
