"""Training a whole cohort at once: every user's local SGD run as one vectorised computation over stacked
per-user parameters (``torch.func.functional_call`` + ``vmap``), instead of one user after another.

The per-user overheads that dominate small federated clients (a Python step loop per user, a parameter reset,
an optimizer per user) are paid once per cohort, the way pfl-research keeps one resident model per worker
(Granqvist et al. 2024, "pfl-research: simulation framework for accelerating research in private federated
learning"). Each user still follows its own :func:`~fedpub.clients.local_training.plan_local_training` (its
subsample and shuffles drawn from its own generator), so the updates equal the per-client loop's to float
rounding. Users are grouped by their number of local steps; a short last batch is padded and masked out of
the loss. Users of a bag-of-words model (an input ``Linear`` on sparse features) are stacked cut to the input
columns their examples use, as the per-client loop trains them (:mod:`fedpub.clients.input_columns`): 100 users
of the 5M-parameter tag logistic regression took 0.054 s a round stacked, 0.09 s one by one. Models with
stochastic or stateful layers (dropout, batch norm, recurrent layers) and tasks whose loss does not split by
example fall back to the per-client loop, and :class:`CohortTrainer` says so. Otherwise
:class:`CohortTrainer` trains each group the way the run's first groups of its size trained faster
(:mod:`fedpub.clients.path_choice`).

A user whose local training raises sends nothing (:class:`~fedpub.clients.local_training.ClientFailure`, its error kept
for the round's log): the round goes on without it, like a Flower node that fails. When a vectorised group
raises, that group is trained again user by user, from the same generator states, to find who failed. The
same goes for ``timeout_s``, a per-user deadline: a group that passes it is trained again user by user, so that
only the users that pass it alone are dropped (:class:`~fedpub.clients.local_training.ClientTimeout`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from fedpub.clients.input_columns import InputColumns, input_columns, input_layer
from fedpub.clients.payload_hooks import check_payload_names, local_adjustment
from fedpub.clients.path_choice import TRIALS, GroupKey, PathChooser
from fedpub.clients.local_training import (
    ClientFailure,
    ClientResult,
    LocalPlan,
    LocalSGD,
    LocalTrainingConfig,
    plan_local_training,
    stop_if_late,
    train_client,
    training_metrics,
)
from fedpub.column_update import UpdateValue
from fedpub.data.base import ClientData
from fedpub.payloads import Payloads
from fedpub.tasks import Task
from fedpub.types import Params, Updates

STACKED_ELEMENTS_BUDGET = 2**26
"""Most parameter elements stacked in one vectorised group (users × parameters): 256 MB of float32 per copy;
a group holds about four copies (parameters, gradients, momentum, update)."""

Results = list[ClientResult | ClientFailure]
GroupRoute = Callable[[list[int], Callable[[], Results], Callable[[], Results]], Results]
"""``route(group, vectorised, loop)``: a step-count group's results, from its user indices and its training
vectorised or user by user (:class:`CohortTrainer`'s choice by timing)."""

_UNVECTORISABLE_LAYERS = (nn.Dropout, nn.modules.batchnorm._BatchNorm, nn.RNNBase)


def vectorisation_blocker(model: nn.Module, task: Task) -> str | None:
    """Why ``model`` and ``task`` cannot be trained vectorised, or ``None`` when they can."""
    if task.example_losses is None or task.example_headline is None:
        return f"task {task.name!r} has no per-example loss to mask padded batches with"
    for name, module in model.named_modules():
        if isinstance(module, _UNVECTORISABLE_LAYERS):
            return f"layer {name!r} ({type(module).__name__}) is stochastic or stateful"
    if any(True for _ in model.buffers()):
        return "the model has buffers (running statistics)"
    return None


def train_cohort_vectorised(
    model: nn.Module,
    params: Params,
    datas: Sequence[ClientData],
    config: LocalTrainingConfig,
    generators: Sequence[torch.Generator],
    task: Task,
    *,
    payloads: Payloads = {},  # noqa: B006 (read only)
    alone: Callable[[int], ClientResult | ClientFailure] | None = None,
    min_users: int = 1,
    route: GroupRoute | None = None,
    sparse_updates: bool = False,
) -> list[ClientResult | ClientFailure]:
    """Train every user of the cohort from ``params`` at once on ``model``'s device; the same results, in the
    same order, as :func:`~fedpub.clients.local_training.train_client` called user by user (a user whose examples
    allow an input-column cut is trained cut, :func:`_train_group`; ``sparse_updates``: its input weight's update
    is then a :class:`~fedpub.column_update.ColumnUpdate`). With ``alone``, a user
    whose plan cannot be drawn, every user of a group that raises, and every user of a step-count group of
    fewer than ``min_users`` users is trained by ``alone(index)`` instead; without it the error propagates
    and every group is vectorised. With ``alone`` and ``route``, each step-count group's results are
    ``route(group, vectorised, loop)`` (the group's user indices, and its training either way) instead of the
    ``min_users`` rule."""
    blocker = vectorisation_blocker(model, task)
    if blocker is not None:
        raise ValueError(f"cannot vectorise: {blocker}")
    device = next(model.parameters()).device
    start = {name: params[name].to(device) for name, _ in model.named_parameters()}
    divisors = {k: v.to(device) for k, v in local_adjustment(payloads).divisors.items()}
    results: list[ClientResult | ClientFailure | None] = [None] * len(datas)
    plans: list[LocalPlan | None] = []
    for index, (data, generator) in enumerate(zip(datas, generators, strict=True)):
        try:
            plans.append(plan_local_training(data, config, generator))
        except Exception:
            if alone is None:
                raise
            plans.append(None)
            results[index] = alone(index)
    cuts = [None if plan is None else input_columns(model, plan.x) for plan in plans]
    for group in _groups(plans, cuts, _elements(model)):

        def vectorised(group: list[int] = group) -> Results:
            try:
                group_cuts = [cuts[i] for i in group]
                return list(_train_group(
                    model, start, [plans[i] for i in group], config, task, divisors,
                    None if group_cuts[0] is None else group_cuts, sparse=sparse_updates,
                ))
            except Exception:
                if alone is None:
                    raise
                return [alone(i) for i in group]

        def loop(group: list[int] = group) -> Results:
            return [alone(i) for i in group]  # type: ignore[misc] (only called with alone)

        if alone is not None and route is not None:
            trained = route(group, vectorised, loop)
        elif alone is not None and len(group) < min_users:
            trained = loop()
        else:
            trained = vectorised()
        for index, result in zip(group, trained, strict=True):
            results[index] = result
    return results  # type: ignore[return-value]


def _elements(model: nn.Module) -> Callable[[InputColumns | None], int]:
    """The parameter elements one user of ``model`` stacks in a group: the whole model's, or with a cut, the
    model's with the input weight cut to the user's columns."""
    total = sum(p.numel() for p in model.parameters())
    layer = input_layer(model)
    if layer is None:
        return lambda cut: total
    rest = total - layer.weight.numel()
    return lambda cut: total if cut is None else rest + len(cut.columns) * layer.out_features


def _groups(
    plans: Sequence[LocalPlan | None], cuts: Sequence[InputColumns | None], elements: Callable[[InputColumns | None], int]
) -> list[list[int]]:
    """Users with the same number of local steps (those with a plan), the cut ones apart from the others, in chunks
    whose stacked parameters (``elements`` per user, each chunk sized by its largest) stay within
    :data:`STACKED_ELEMENTS_BUDGET`."""
    by_steps: dict[tuple[int, bool], list[int]] = defaultdict(list)
    for index, plan in enumerate(plans):
        if plan is not None:
            by_steps[(len(plan.batches), cuts[index] is not None)].append(index)
    groups = []
    for _, ids in sorted(by_steps.items()):
        chunk = max(1, STACKED_ELEMENTS_BUDGET // max(max(elements(cuts[i]) for i in ids), 1))
        groups += [ids[i : i + chunk] for i in range(0, len(ids), chunk)]
    return groups


def _train_group(
    model: nn.Module,
    start: Params,
    plans: Sequence[LocalPlan],
    config: LocalTrainingConfig,
    task: Task,
    divisors: Updates,
    cuts: Sequence[InputColumns] | None = None,
    *,
    sparse: bool = False,
) -> list[ClientResult]:
    """K users with S local steps each: S vectorised steps over (K, batch) index and mask tensors; raises
    :class:`~fedpub.clients.local_training.ClientTimeout` when the group passes ``config.timeout_s``.

    With ``cuts`` (every user's input columns, :mod:`fedpub.clients.input_columns`), each user trains its input
    weight cut to its columns, as the per-client loop does: the users' columns are padded to the group's widest
    (a padded column's inputs are zero, so its gradient is zero and it never moves) and the cut weights stacked
    ``(K, width, outputs)``, so a 5M-parameter bag-of-words model stacks each user's few hundred columns, not
    the whole weight."""
    started = time.perf_counter()
    device = next(iter(start.values())).device
    users, steps, batch_size = len(plans), len(plans[0].batches), config.batch_size
    offsets = torch.tensor([0] + [len(p.y) for p in plans]).cumsum(0)[:-1].tolist()
    anchor_dims: dict[str, int | None] = dict.fromkeys(start)
    inputs = [p.x for p in plans]
    stacked_cut: dict[str, torch.Tensor] = {}
    if cuts is not None:
        weight, width = cuts[0].weight, max(len(cut.columns) for cut in cuts)
        columns = torch.zeros(users, width, dtype=torch.long)
        used = torch.zeros(users, width, dtype=torch.bool)
        for k, cut in enumerate(cuts):
            columns[k, : len(cut.columns)], used[k, : len(cut.columns)] = cut.columns, True
        inputs = [p.x.index_select(1, columns[k]) * used[k] for k, p in enumerate(plans)]
        columns, used = columns.to(device), used.to(device)
        stacked_cut[weight] = start[weight].movedim(-1, 0)[columns]  # (K, width, outputs), each user's columns
        anchor_dims[weight] = 0
        if weight in divisors:  # a padded column's divisor is 1: its gradient is zero, 0 / 1 moves nothing
            gathered = divisors[weight].movedim(-1, 0)[columns]
            divisors = {**divisors, weight: torch.where(used.unsqueeze(-1), gathered, torch.ones_like(gathered))}
    stacked = {name: stacked_cut[name] if name in stacked_cut else value.expand(users, *value.shape).clone()
               for name, value in start.items()}
    anchor = {name: stacked[name].clone() if dim == 0 else start[name] for name, dim in anchor_dims.items()}
    x = torch.cat(inputs).to(device, non_blocking=True)
    y = torch.cat([p.y for p in plans]).to(device, non_blocking=True)
    index = torch.zeros(users, steps, batch_size, dtype=torch.long)
    mask = torch.zeros(users, steps, batch_size)
    for k, plan in enumerate(plans):
        for s, batch in enumerate(plan.batches):
            index[k, s, : len(batch)] = batch + offsets[k]
            mask[k, s, : len(batch)] = 1.0
    index, mask = index.to(device, non_blocking=True), mask.to(device, non_blocking=True)
    sgd = LocalSGD(stacked, config, divisors)
    objective = _user_objective(model, config, task, None if cuts is None else cuts[0].weight)
    per_user_gradient = vmap(grad(objective, has_aux=True), in_dims=(0, 0, 0, 0, anchor_dims))
    loss_sum = torch.zeros(users, device=device)
    hits = torch.zeros(users, device=device)
    total = torch.zeros(users, device=device)
    for s in range(steps):
        batch = index[:, s]
        gradients, (loss, numerator, denominator) = per_user_gradient(stacked, x[batch], y[batch], mask[:, s], anchor)
        sgd.step(gradients)
        count = mask[:, s].sum(dim=1)
        loss_sum, hits, total = loss_sum + loss * count, hits + numerator, total + denominator
        stop_if_late(config, started, s + 1, steps)
    seen = mask.sum(dim=(1, 2)).tolist()
    loss_sum, hits, total = loss_sum.tolist(), hits.tolist(), total.tolist()
    # the users' updates are rows of the group's tensors, computed in place and moved in one copy per tensor
    deltas = {name: value.sub_(anchor[name]).to("cpu") for name, value in stacked.items()}
    updates: list[dict[str, UpdateValue]] = [{name: delta[k] for name, delta in deltas.items()} for k in range(users)]
    if cuts is not None:
        for k, cut in enumerate(cuts):
            updates[k] = cut.update({**updates[k], cut.weight: updates[k][cut.weight][: len(cut.columns)]},
                                    start, sparse=sparse)
    return [
        ClientResult(
            updates[k],
            len(plans[k].y),
            training_metrics(task, loss_sum[k], hits[k], total[k], int(seen[k])),
        )
        for k in range(users)
    ]


def _user_objective(model: nn.Module, config: LocalTrainingConfig, task: Task, cut_weight: str | None = None):  # noqa: ANN202 (a closure for torch.func)
    """One user's masked minibatch objective as a function of its parameters, with (loss, headline terms);
    ``cut_weight``: that input weight is given cut, ``(columns, outputs)``, and the inputs cut alike."""

    def objective(
        params: Params, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, anchor: Params
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        layers = params if cut_weight is None else {**params, cut_weight: params[cut_weight].movedim(0, -1)}
        logits = functional_call(model, layers, (x,))
        loss = (task.example_losses(logits, y) * mask).sum() / mask.sum().clamp_min(1.0)
        numerator, denominator = task.example_headline(logits, y)
        value = loss
        if config.prox_weight:
            value = loss + config.prox_weight * sum(((params[n] - anchor[n]) ** 2).sum() for n in params)
        aux = (loss.detach(), (numerator * mask).sum(), (denominator * mask).sum())
        return value, aux

    return objective


def model_signature(model: nn.Module) -> str:
    """A model's description in the keys of the path choices: its class and parameter count."""
    return f"{type(model).__name__}({sum(p.numel() for p in model.parameters())} parameters)"


PATHS = ("auto", "vectorised", "loop")
"""``client.path``: time both ways and keep the faster per group size (auto), or always one way."""


class CohortTrainer:
    """Trains a round's cohort on one resident model, each group of users with the same number of local steps
    either vectorised or user by user (a model whose first layer is a ``Linear``: each user cut to the input
    columns its examples use, :mod:`fedpub.clients.input_columns`). ``path``: ``auto`` times both ways on the run's
    first groups of each (model, group size) and keeps the faster (:class:`~fedpub.clients.path_choice.PathChooser`,
    which ``stored`` choices seed: a resumed run's); ``vectorised`` vectorises every group of at least
    ``min_users`` users; ``loop`` trains user by user. A model or task that cannot be vectorised is trained user
    by user (``auto``; :attr:`reason` says why) or refused (``vectorised``). ``clock`` (seconds) times the groups.
    While a group is timed, the loop's results are the ones kept."""

    def __init__(
        self,
        model: nn.Module,
        config: LocalTrainingConfig,
        task: Task,
        *,
        path: str = "auto",
        min_users: int = 1,
        stored: Mapping[str, Any] | None = None,
        trials: int = TRIALS,
        clock: Callable[[], float] = time.perf_counter,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if path not in PATHS:
            raise ValueError(f"client.path must be one of {', '.join(PATHS)}, got {path!r}")
        self.model, self.config, self.task, self.path, self.min_users = model, config, task, path, min_users
        self.signature, self.clock = model_signature(model), clock
        self.chooser = PathChooser(stored, trials=trials, log=log)
        blocker = vectorisation_blocker(model, task)
        if path == "vectorised" and blocker is not None:
            raise ValueError(f"client.path is vectorised, but this model cannot be: {blocker}; use auto or loop")
        self.reason: str | None = "client.path is loop" if path == "loop" else blocker
        self.groups_timed = 0
        """Groups trained both ways so far, to time them (each such group costs both paths' work)."""

    @property
    def mode(self) -> str:
        if self.reason is not None:
            return "per-client loop"
        return "vectorised" if self.path == "vectorised" else "fastest measured"

    def describe(self) -> str:
        """One line for the run log."""
        if self.reason is not None:
            return f"cohort training: {self.mode} ({self.reason})"
        if self.path == "auto":
            loop = "per-client loop, input-column cut" if input_layer(self.model) is not None else "per-client loop"
            return (f"cohort training: fastest measured (per group size, vectorised or {loop}, each timed on "
                    f"up to the first {self.chooser.trials} groups of that size)")
        if self.min_users > 1:
            return (f"cohort training: {self.mode} (users with the same number of local steps, {self.min_users} or "
                    "more; fewer: one by one)")
        return f"cohort training: {self.mode}"

    def choices(self) -> dict[str, Any]:
        """The path choices made so far (for the run's ``paths.json``)."""
        return self.chooser.to_json()

    def train(
        self,
        params: Params,
        datas: Sequence[ClientData],
        generators: Sequence[torch.Generator],
        *,
        payloads: Payloads = {},  # noqa: B006 (read only)
        sparse_updates: bool = False,
    ) -> list[ClientResult | ClientFailure]:
        """Every user's :class:`ClientResult`, in the order of ``datas``; a :class:`ClientFailure` (the error,
        no update) for a user whose training raises. With ``sparse_updates``, the update of an input layer cut
        to a user's columns is a :class:`~fedpub.column_update.ColumnUpdate`. ``payloads``: the round's, each
        applied by its hook (:mod:`fedpub.clients.payload_hooks`; one without a hook raises, for the cohort)."""
        check_payload_names(payloads, where="this cohort")
        if not datas:
            return []
        states = [g.get_state() for g in generators]

        def alone(index: int) -> ClientResult | ClientFailure:
            generator = generators[index]
            generator.set_state(states[index])  # as if the vectorised attempt had not drawn from it
            try:
                return train_client(
                    self.model, params, datas[index], self.config, generator, self.task,
                    payloads=payloads, sparse_update=sparse_updates,
                )
            except Exception as exc:  # noqa: BLE001 (any error of one user's training only loses that user)
                return ClientFailure.of(exc)

        if self.reason is None:
            return train_cohort_vectorised(
                self.model, params, datas, self.config, generators, self.task, payloads=payloads,
                alone=alone, min_users=self.min_users, route=self._route if self.path == "auto" else None,
                sparse_updates=sparse_updates,
            )
        return [alone(i) for i in range(len(datas))]

    def _route(self, group: list[int], vectorised: Callable[[], Results], loop: Callable[[], Results]) -> Results:
        """The group trained the way chosen for its key (or implied by the other sizes' choices); while the key
        is timed, both ways (the loop's results kept), the seconds recorded unless a user failed (a failure's
        retries would time something else) or the group was the trainer's first timed one."""
        key = GroupKey.of(self.signature, len(group))
        chosen = self.chooser.choice(key) or self.chooser.implied(self.signature, len(group))
        if chosen is not None:
            return vectorised() if chosen == "vectorised" else loop()
        runs = {"vectorised": vectorised, "loop": loop}
        # the trainer's first timed group (its first vectorised one, unless stored choices ran one before) pays
        # torch.func's set-up (the bag-of-words logistic regression's first group of 100 users: 0.79 s, then
        # 0.05 s): not counted
        counted = self.groups_timed > 0
        self.groups_timed += 1
        first = self.chooser.first(key)
        results: dict[str, Results] = {}
        seconds: dict[str, float] = {}
        for candidate in sorted(runs, key=lambda c: c != first):
            self._synchronize()
            started = self.clock()
            results[candidate] = runs[candidate]()
            self._synchronize()
            seconds[candidate] = self.clock() - started
        failed = any(isinstance(r, ClientFailure) for trained in results.values() for r in trained)
        if not failed and counted:
            self.chooser.record(key, seconds)
        return results["loop"]

    def _synchronize(self) -> None:
        device = next(self.model.parameters()).device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
