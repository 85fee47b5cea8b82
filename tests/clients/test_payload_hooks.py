"""Local training applies each client payload by the hook of its name, and refuses one it has no hook for: before
the run (the strategy), for the whole cohort, and on a single client, never training as if it were not sent."""

import pytest
import torch

from fedpub import recipe_registry
from fedpub.clients.cohort_training import CohortTrainer
from fedpub.clients.local_training import LocalTrainingConfig, train_client
from fedpub.clients.payload_hooks import (
    PAYLOAD_HOOKS,
    LocalAdjustment,
    UnknownPayload,
    check_strategy_payloads,
    local_adjustment,
)
from fedpub.data.base import ClientData
from fedpub.models import build_model
from fedpub.models.seeded import model_params
from fedpub.payloads import ClientPayload
from fedpub.privacy.events import PoissonSampling
from fedpub.step import chain
from fedpub.steps.aggregate import aggregate
from fedpub.steps.clip import clip
from fedpub.strategy import StrategyCore
from fedpub.tasks import CLASSIFICATION

CONFIG = LocalTrainingConfig(epochs=1, batch_size=4, lr=0.1)


def _data(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ClientData(torch.rand(n, 1, 28, 28, generator=g), torch.randint(10, (n,), generator=g))


def test_the_preconditioner_hook_divides_the_gradients_by_its_tensors():
    a = {"w": torch.full((2,), 2.0)}
    assert local_adjustment({"preconditioner": a}).divisors == a
    assert local_adjustment({}) == LocalAdjustment()


def test_every_payload_a_registered_part_may_send_has_a_hook():
    """What the registry declares a part may send, local training can apply (issue 46: this test pinned the hook
    list's exact contents, so every new payload broke it)."""
    declared = {name for part in recipe_registry.PARTS for name in part.payloads}
    assert declared and declared <= set(PAYLOAD_HOOKS)


def test_a_payload_without_a_hook_is_refused_by_a_client_and_by_the_cohort_naming_it():
    model = build_model("emnist_mlp", 10)
    params = model_params(model)
    sent = {"center": {k: torch.zeros_like(v) for k, v in params.items()}}
    with pytest.raises(UnknownPayload, match=r"this client would be sent the payloads \['center'\].*known: "
                                             r"\[.*\].*clients/payload_hooks.py"):
        train_client(model, params, _data(), CONFIG, torch.Generator().manual_seed(0), payloads=sent)
    for path in ("loop", "vectorised"):  # not one ClientFailure per user: the cohort is refused
        trainer = CohortTrainer(model, CONFIG, CLASSIFICATION, path=path)
        with pytest.raises(UnknownPayload, match=r"this cohort would be sent the payloads \['center'\]"):
            trainer.train(params, [_data()], [torch.Generator().manual_seed(0)], payloads=sent)


def test_a_strategy_sending_a_payload_without_a_hook_is_refused_when_the_run_is_built():
    center = ClientPayload("center", lambda state: None, private=False, public=True)
    core = StrategyCore("dope_x", chain(clip(1.0), aggregate()), PoissonSampling(0.5), 4, 0, client_payloads=(center,))
    with pytest.raises(UnknownPayload, match=r"strategy `dope_x`'s public clients would be sent the payloads "
                                             r"\['center'\]"):
        check_strategy_payloads(core)
    known = ClientPayload("preconditioner", lambda state: None, public=True)
    check_strategy_payloads(StrategyCore("adadps", chain(clip(1.0), aggregate()), PoissonSampling(0.5), 4, 0,
                                         client_payloads=(known,)))
