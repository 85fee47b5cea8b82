"""Preconditioning of the private updates by a public A (AdaDPS: Li, Zaheer, Liu, Smith, Smith 2023,
"Private adaptive optimization with side information", Alg. 1 and Alg. 3).

A is non-sensitive, so it costs no privacy. It comes either from side information (``static``, e.g.
token frequencies: :func:`token_frequency_preconditioner`) or from the public users' updates as
RMSProp statistics: v ← β v + (1−β) s_t, A ∝ sqrt(v / (1 − β^count)) + ε (bias-corrected), with s_t either
the public users' mean of squared updates mean_pub(Δ²) (``statistic="user_second_moment"``) or, as the paper's
RMSProp, the square of the public minibatch-mean update (mean_pub Δ)² (``statistic="rmsprop"``: the public cohort is
the minibatch, its mean update the pseudo-gradient),
refreshed with this round's public updates before A is used (Alg. 1, option 1); before any public
update A = 1. Public-statistics A is scaled to mean 1 over all coordinates: the statistics are of
model updates, not of gradients, so only their relative sizes are meaningful, and the clip norm and
learning rates keep the scale they have without preconditioning. Placement "server" divides every private update, and the public mean, by A before
clipping; placement "client" leaves the updates as they are, because each client already divided
its local gradients by the A of :func:`current_preconditioner` (Alg. 3). A = 1 is DP-FedAvg. The step prepares
A from its state and the public updates; at the server placement its per-user map divides by A.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

import torch

from fedpub import tree
from fedpub.cohort_updates import Cohort
from fedpub.seeding import torch_generator
from fedpub.step import Mapped, Prepared, Step, user_step
from fedpub.types import Params, RoundContext, Updates


class PublicStatistics(TypedDict):
    """A from the public users' updates: their RMSProp second moments v after ``count`` refreshes, with the β and
    ε that turn them into A."""

    v: Updates
    count: int
    beta: float
    eps: float


class SideInformation(TypedDict):
    """A fixed A from side information."""

    static: Updates


PreconditionState = PublicStatistics | SideInformation


def precondition(
    placement: Literal["server", "client"],
    *,
    static: Updates | None = None,
    beta: float = 0.9,
    eps: float = 1e-3,
    statistic: Literal["user_second_moment", "rmsprop"] = "user_second_moment",
) -> Step:
    """Divide the private updates by A (``placement="server"``) or track A for the clients (``"client"``)."""
    if placement not in ("server", "client"):
        raise ValueError(f"placement must be 'server' or 'client', got {placement!r}")
    if statistic not in ("user_second_moment", "rmsprop"):
        raise ValueError(f"statistic must be 'user_second_moment' or 'rmsprop', got {statistic!r}")
    if not 0 <= beta < 1 or not eps > 0:
        raise ValueError(f"precondition needs 0 <= beta < 1 and eps > 0, got {beta}, {eps}")
    if static is not None:
        for name, value in static.items():
            if not bool((torch.isfinite(value) & (value > 0)).all()):
                raise ValueError(f"static preconditioner {name!r} must be finite and > 0 everywhere")

    def init(params: Params) -> PreconditionState:
        if static is None:
            return PublicStatistics(v=tree.zeros_like(params), count=0, beta=beta, eps=eps)
        if {k: v.shape for k, v in static.items()} != {k: v.shape for k, v in params.items()}:
            raise ValueError("the static preconditioner must have the parameters' names and shapes")
        return SideInformation(static=tree.clone(static))

    def prepare(
        like: Params,
        state: PreconditionState,
        *,
        ctx: RoundContext,
        public_updates: Cohort | None = None,
        public_mean: Updates | None = None,
    ) -> Prepared:
        used = 0 if public_updates is None else len(public_updates)
        if "static" not in state and used:
            stacked = public_updates.stacked().items()
            if statistic == "rmsprop":
                second_moment = {k: v.mean(dim=0).pow(2) for k, v in stacked}
            else:
                second_moment = {k: v.pow(2).mean(dim=0) for k, v in stacked}
            v = {k: beta * state["v"][k] + (1 - beta) * second_moment[k] for k in second_moment}
            state = PublicStatistics(v=v, count=state["count"] + 1, beta=state["beta"], eps=state["eps"])
        a = current_preconditioner(state)
        if a is None:
            a = tree.map_tree(torch.ones_like, state["v"])
        outputs: dict[str, Updates] = {"preconditioner": a}
        if placement == "server":
            if public_mean is not None:
                outputs["public_mean"] = {k: v / a[k] for k, v in public_mean.items()}
        values = torch.cat([x.detach().flatten().double() for x in a.values()])
        metrics = {
            "preconditioner_min": float(values.min()),
            "preconditioner_max": float(values.max()),
            "preconditioner_mean": float(values.mean()),
            "public_updates": float(used),
        }
        return Prepared(state, {"preconditioner": a}, outputs, metrics)

    def divide(updates: Cohort, values: Mapping[str, Any]) -> Mapped:
        a = values["preconditioner"]
        return Mapped(updates.map(lambda row: {k: v / a[k] for k, v in row.items()}))

    declared = ("preconditioner", "public_mean") if placement == "server" else ("preconditioner",)
    return user_step(prepare, apply=divide if placement == "server" else None, init=init,
                     optional_inputs=("public_updates", "public_mean"), outputs=declared)


def current_preconditioner(state: PreconditionState) -> Updates | None:
    """The A a round uses from ``state`` on (for the clients: the next round); None means A = 1.
    The public source's state carries β and ε, so A follows from the state alone."""
    if "static" in state:
        return state["static"]
    if state["count"] == 0:
        return None
    correction = 1 - state["beta"] ** state["count"]
    a = {k: torch.sqrt(v / correction) + state["eps"] for k, v in state["v"].items()}
    mean = torch.cat([x.flatten() for x in a.values()]).mean()
    return {k: v / mean for k, v in a.items()}


def token_frequency_preconditioner(
    params: Params,
    word_counts: Sequence[float] | torch.Tensor,
    *,
    weight_name: str,
    profile: Literal["power", "top_k"] = "power",
    power: float = 1.0,
    floor: float = 1e-2,
    frequent_words: int = 100,
    rare_scale: float = 200.0,
    shuffle_seed: int | None = None,
) -> Updates:
    """Side information for bag-of-words logistic regression (weight ``[num_labels, vocab]``), so rare tokens take
    larger steps; every other parameter gets A = 1. Column j of ``weight_name`` gets, by ``profile``:

    - ``power``: A = max((count_j / mean count)^power, floor);
    - ``top_k``: A = 1 for the ``frequent_words`` most frequent words and 1/``rare_scale`` for every other word, the
      side information of the paper's own federated code (its 100 most frequent words at 1, every other word's
      gradient × 200; ties broken by column order).

    ``word_counts`` follow the model's vocabulary (column) order. With a ``shuffle_seed`` the counts of the words
    that occur (count > 0) are first permuted among those words by a permutation drawn from it: the control shuffled
    A (fedpub issue 36), the same A values on the words training sees, with the information of which word has which
    gone. A word that never occurs keeps its count 0: permuting across the whole vocabulary would instead hand most
    occurring words the A of the many words that never occur (under ``power`` a 100× larger step on nearly every
    word), another step size rather than the same side information shuffled."""
    if weight_name not in params or params[weight_name].dim() != 2:
        raise ValueError(f"weight_name {weight_name!r} must name a 2-d weight among {sorted(params)}")
    if profile not in ("power", "top_k"):
        raise ValueError(f"profile must be 'power' or 'top_k', got {profile!r}")
    if not (floor > 0 and math.isfinite(power)):
        raise ValueError(f"token frequencies need floor > 0 and a finite power, got {floor}, {power}")
    if not (frequent_words >= 1 and rare_scale > 0 and math.isfinite(rare_scale)):
        raise ValueError(f"top_k needs frequent_words >= 1 and a finite rare_scale > 0, got {frequent_words}, "
                         f"{rare_scale}")
    weight = params[weight_name]
    counts = torch.as_tensor(word_counts, dtype=torch.float64)
    if counts.shape != (weight.shape[1],):
        raise ValueError(
            f"word_counts has {counts.numel()} entries but {weight_name!r} has a vocabulary of {weight.shape[1]}"
        )
    if not bool(torch.isfinite(counts).all() and (counts >= 0).all() and counts.sum() > 0):
        raise ValueError("word_counts must be finite, >= 0 and not all zero")
    if profile == "top_k" and frequent_words > counts.numel():
        raise ValueError(f"frequent_words {frequent_words} exceeds the vocabulary of {counts.numel()} words")
    if shuffle_seed is not None:
        occurring = (counts > 0).nonzero().squeeze(1)
        order = torch.randperm(len(occurring), generator=torch_generator(shuffle_seed, "shuffled_side_information"))
        counts = counts.clone()
        counts[occurring] = counts[occurring[order]]
    if profile == "power":
        column = (counts / counts.mean()).pow(power).clamp_min(floor)
    else:
        column = torch.full_like(counts, 1 / rare_scale)
        column[counts.argsort(descending=True, stable=True)[:frequent_words]] = 1.0
    column = column.to(weight.dtype)
    a = tree.map_tree(torch.ones_like, params)
    a[weight_name] = column.expand_as(weight).clone()
    return a
