"""AdaDPS in federated form (Li et al. 2023, "Private adaptive optimization with side
information", Alg. 1 and 3): a preconditioner A, public (the public users' RMSProp second moments)
or side information (the token frequencies of a dataset's vocabulary: rare words get larger steps), divides the
updates before they are clipped and noised — at the server (each update Δ_k ⊘ A) or on the clients
(each local gradient ∇f ⊘ A, Alg. 3, which the paper found better in FL). A is public: it costs no
privacy, and A = 1 is DP-FedAvg exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedpub.config import PreconditionConfig
from fedpub.payloads import ClientPayload
from fedpub.step import Step
from fedpub.steps.precondition import current_preconditioner, precondition, token_frequency_preconditioner
from fedpub.strategies.build_context import BuildContext
from fedpub.types import Params, StepState, Updates


def preconditioning_steps(ctx: BuildContext) -> list[tuple[str, Step]]:
    """The step placed first in the chain (before recentering and clipping); A fixed by ``ctx.side_information``
    when given."""
    config = ctx.config.precondition
    step = precondition(config.placement, static=ctx.side_information, beta=config.beta, eps=config.eps,
                        statistic=config.statistic)
    return [("precondition", step)]


def client_preconditioner(state: StepState) -> Updates | None:
    """The A the clients divide their local gradients by this round (None: not yet any)."""
    return current_preconditioner(state["precondition"])


def client_payloads(config: PreconditionConfig | None) -> tuple[ClientPayload, ...]:
    """With the client placement, the payload ``preconditioner`` (the hook of that name divides each local
    gradient by it): sent to every private client, and to the public clients too when A does not come from the
    public users (their updates are the statistics A is made of, so they train plainly)."""
    if config is None or config.placement != "client":
        return ()
    return (ClientPayload("preconditioner", client_preconditioner, public=config.source != "public"),)


def token_frequency_side_information(
    config: PreconditionConfig, params: Params, word_counts: Sequence[float], *, weight_name: str, seed: int
) -> Updates:
    """A from the counts of the model's vocabulary words (in its column order), on its bag-of-words weight
    ``weight_name``; with ``config.shuffle``, the counts permuted by a permutation drawn from the run's ``seed``."""
    return token_frequency_preconditioner(
        params, word_counts, weight_name=weight_name, profile=config.profile, power=config.power, floor=config.floor,
        frequent_words=config.frequent_words, rare_scale=config.rare_scale,
        shuffle_seed=seed if config.shuffle else None,
    )
