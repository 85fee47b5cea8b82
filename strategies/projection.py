"""Public-subspace projection in federated form (PDP-SGD: Zhou, Wu, Banerjee 2021, "Bypassing the ambient
dimension: private SGD with gradient subspace identification", Alg. 1; GEP: Yu et al. 2021, "Do not let privacy
overbill utility"): each round the public users train too; every private update is projected onto the top-k
subspace V of their updates before the clip, Δ̄ = (Σ_k clip(V Vᵀ Δ_k, C) + N(0, z²C²)) / m, and with
``noise_space: subspace`` the noisy mean is projected as well, V Vᵀ Δ̄, so the noise lies in the k subspace
dimensions (PDP-SGD's noisy projected gradient) instead of the model's d. V is public and the projected noise is
post-processing: the sensitivity C, the mechanism and the accounting are DP-FedAvg's
(:mod:`fedpub.steps.project` gives the argument). A round without a public update is DP-FedAvg's.
"""

from __future__ import annotations

from fedpub.config import ProjectionConfig
from fedpub.step import Step
from fedpub.steps.project import project, project_noise
from fedpub.strategies.build_context import BuildContext


def project_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """Before the clip (after AdaDPS's division by A and DOPE's recentering, whose geometry the basis takes): the
    projection onto the public updates' top-``projection.k`` subspace; refuses a k above the public cohort."""
    config = ctx.config
    k, public = config.projection.k, config.public_clients_per_round
    if k > public:
        raise ValueError(f"strategy.projection.k ({k}) exceeds strategy.public_clients_per_round ({public}): the "
                         f"public updates span at most {public} directions; lower k or raise the public cohort")
    preconditioned = config.precondition is not None and config.precondition.placement == "server"
    return [("project", project(k, preconditioned=preconditioned))]


def noise_dimensions(projection: ProjectionConfig) -> int | None:
    """How many dimensions the released noise lies in (the part's ``noise_dimensions`` declaration): k when the
    noisy mean is projected onto the public subspace (``projection.noise_space: subspace``), else None (the
    model's d)."""
    return projection.k if projection.noise_space == "subspace" else None


def project_noise_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """After the noise, with ``noise_space: subspace``: the noisy mean projected onto the basis (none with
    ``ambient``)."""
    projection = ctx.config.projection
    return [("project_noise", project_noise())] if projection and noise_dimensions(projection) is not None else []
