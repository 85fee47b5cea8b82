"""Projection of the private updates onto the public users' top-k subspace (PDP-SGD: Zhou, Wu, Banerjee 2021,
"Bypassing the ambient dimension: private SGD with gradient subspace identification", Alg. 1; GEP: Yu, Zhang, Chen,
Yin, Liu 2021, "Do not let privacy overbill utility: gradient embedding perturbation for private learning").

``project`` prepares, from the round's public updates P (n × d), an orthonormal basis V (d × r) of their top-r
right singular subspace, r = min(k, rank P) (from the n × n Gram matrix P Pᵀ, accumulated in float64, so nothing
d × d or d × n in float64 is formed; directions whose singular value is below 1e-4 of the largest are dropped as
numerically null), and maps each private update Δ_k to V Vᵀ Δ_k, before the clip. V is a function of the public
updates only: it costs no privacy. ``project_noise`` (``noise_space: subspace``) maps the noisy mean, after the
noise, to V Vᵀ of it, so the released noise lies in span(V).

Privacy. The clip then scales each projected update to norm ≤ C, so the sum of the clipped updates still moves by
at most C when one private user is added or removed (the projection only changes what each user's row is, and V
does not depend on the private users): the Gaussian mechanism, its ``GaussianDpEvent(z)`` and the accounting are
DP-FedAvg's unchanged. ``project_noise`` is post-processing of that release with a public V, so it adds no event
and the guarantee is the same. Since every clipped update lies in span(V), their sum S does, and
V Vᵀ(S + N(0, z²C² I_d)) = S + V·N(0, z²C² I_r) (V orthonormal): the noise drawn in the ambient d dimensions and
projected is exactly noise drawn in the r subspace dimensions and mapped back (PDP-SGD's noisy projected gradient),
of std z·C/m along each basis direction of the mean and 0 orthogonal to span(V). Drawing it in d dimensions and
projecting, instead of in r, keeps the private mean's noise step (its seed, OpenDP sampler, schedules, DP-FTRL's
tree) as it is.

A round without a usable public update has no basis (r = 0): the updates pass unprojected, which is the round's
DP-FedAvg (the round driver warns that the round runs without its public part), and the metric ``projected`` is 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from fedpub.cohort_updates import Cohort
from fedpub.step import EmptyState, Mapped, Prepared, Step, StepResult, after_sum_step, user_step
from fedpub.types import Params, RoundContext, Updates

Basis = dict[str, torch.Tensor]
"""An orthonormal basis of r directions of the parameter space: per parameter, a tensor ``(r, *shape)``; direction
i is the i-th slice of every tensor."""

NULL_DIRECTION = 1e-4
"""A public singular value below this fraction of the largest is numerically null: its direction is dropped."""


def top_subspace(public: Cohort, k: int, divisor: Updates | None = None) -> Basis | None:
    """An orthonormal basis of the top-``k`` subspace of ``public``'s rows (each divided by ``divisor`` first when
    given), shaped and typed like the rows; None when the rows span nothing (no row, or all zero). Deterministic:
    the eigenvectors of the Gram matrix are signed so that their largest entry is positive."""
    if len(public) == 0:
        return None
    stacked = public.stacked()
    if divisor is not None:
        stacked = {key: value / divisor[key] for key, value in stacked.items()}
    flat = {key: value.reshape(len(public), -1).double() for key, value in stacked.items()}
    gram = sum(rows @ rows.T for rows in flat.values())
    eigenvalues, eigenvectors = torch.linalg.eigh(gram.cpu())
    order = torch.argsort(eigenvalues, descending=True)
    eigenvalues, eigenvectors = eigenvalues[order], eigenvectors[:, order]
    largest = float(eigenvalues[0])
    kept = int((eigenvalues > largest * NULL_DIRECTION**2).sum()) if largest > 0 else 0
    r = min(k, kept)
    if r == 0:
        return None
    u = eigenvectors[:, :r]
    signs = torch.sign(u.gather(0, u.abs().argmax(dim=0, keepdim=True)))
    coefficients = (u * signs / eigenvalues[:r].sqrt()).T  # (r, n): V = Pᵀ U Λ^(-1/2)
    like = public.like
    return {key: (coefficients.to(rows.device) @ rows).to(like[key].dtype).reshape(r, *like[key].shape)
            for key, rows in flat.items()}


def project_onto(update: Updates, basis: Basis) -> Updates:
    """V Vᵀ ``update``: its coordinates along the basis (summed over the parameters in float64), mapped back."""
    coordinates = sum(
        (basis[key].reshape(len(basis[key]), -1) @ value.reshape(-1).to(basis[key].dtype)).double()
        for key, value in update.items()
    )
    return {
        key: (coordinates.to(basis[key].dtype) @ basis[key].reshape(len(basis[key]), -1))
        .reshape(value.shape).to(value.dtype)
        for key, value in update.items()
    }


def project(k: int, *, preconditioned: bool = False) -> Step:
    """Map each private update to its projection onto the top-``k`` subspace of the round's public updates
    (output ``basis``: None without one). ``preconditioned``: the private updates were divided by AdaDPS's A at
    the server before this step, so the public updates are too (the required input ``preconditioner``)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")

    def subspace(like: Params, public_updates: Cohort | None, preconditioner: Updates | None) -> Prepared:
        basis = None if public_updates is None else top_subspace(public_updates, k, preconditioner)
        rank = 0 if basis is None else len(next(iter(basis.values())))
        metrics = {"projected": float(basis is not None), "rank": float(rank)}
        return Prepared(EmptyState(), {"basis": basis}, {"basis": basis}, metrics)

    def apply(updates: Cohort, values: Mapping[str, Any]) -> Mapped:
        basis = values["basis"]
        return Mapped(updates if basis is None else updates.map(lambda row: project_onto(row, basis)))

    if preconditioned:
        def prepare_preconditioned(like: Params, state: EmptyState, *, ctx: RoundContext, preconditioner: Updates,
                                   public_updates: Cohort | None = None) -> Prepared:
            return subspace(like, public_updates, preconditioner)

        return user_step(prepare_preconditioned, apply=apply, inputs=("preconditioner",),
                         optional_inputs=("public_updates",), outputs=("basis",))

    def prepare(like: Params, state: EmptyState, *, ctx: RoundContext,
                public_updates: Cohort | None = None) -> Prepared:
        return subspace(like, public_updates, None)

    return user_step(prepare, apply=apply, optional_inputs=("public_updates",), outputs=("basis",))


def project_noise() -> Step:
    """After the noise: the noisy mean projected onto span(``basis``), so the noise lies in the subspace (the
    signal already does); unchanged in a round without a basis."""

    def update(updates: Updates, state: EmptyState, *, ctx: RoundContext, basis: Basis | None) -> StepResult:
        return StepResult(updates if basis is None else project_onto(updates, basis), state)

    return after_sum_step(update, inputs=("basis",))
