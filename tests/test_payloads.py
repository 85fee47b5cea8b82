"""Client payloads: declared by a recipe part, computed from the strategy state for the private or the public
clients, carried by the round plan; AdaDPS's preconditioner is one, placed as today's rule says."""

import pytest
import torch

from fedpub.config import PreconditionConfig
from fedpub.payloads import ClientPayload
from fedpub.privacy.events import PoissonSampling
from fedpub.step import chain
from fedpub.steps.aggregate import aggregate
from fedpub.steps.clip import clip
from fedpub.strategies import adadps
from fedpub.strategy import StrategyCore


def _core(*payloads: ClientPayload) -> StrategyCore:
    return StrategyCore("t", chain(clip(1.0), aggregate()), PoissonSampling(0.5), 4, 0, client_payloads=payloads)


def test_each_payload_goes_to_the_clients_it_declares_and_only_when_it_has_tensors():
    center = ClientPayload("center", lambda state: {"w": torch.ones(2)}, private=False, public=True)
    norm = ClientPayload("clip_norm", lambda state: {"c": torch.tensor(1.0)}, public=True)
    later = ClientPayload("later", lambda state: None)
    core = _core(center, norm, later)
    assert set(core.payloads({})) == {"clip_norm"} and set(core.payloads({}, public=True)) == {"center", "clip_norm"}
    assert core.payload_names() == ("clip_norm", "later")
    assert core.payload_names(public=True) == ("center", "clip_norm")


def test_a_payload_name_is_one_word_and_declared_once():
    with pytest.raises(ValueError, match="letters, digits and underscores, got 'a-b'"):
        ClientPayload("a-b", lambda state: None)
    with pytest.raises(ValueError, match=r"client payloads \['center'\] are declared more than once"):
        _core(ClientPayload("center", lambda s: None), ClientPayload("center", lambda s: None, public=True))


@pytest.mark.parametrize(
    "precondition, private, public",
    [
        ({"placement": "client"}, ("preconditioner",), ()),  # A comes from the public users: they train plainly
        ({"placement": "client", "source": "token_frequency"}, ("preconditioner",), ("preconditioner",)),
        ({"placement": "server"}, (), ()),
    ],
)
def test_adadps_sends_its_preconditioner_to_the_clients_todays_rule_names(precondition, private, public):
    payloads = adadps.client_payloads(PreconditionConfig.model_validate(precondition))
    core = _core(*payloads)
    assert core.payload_names() == private and core.payload_names(public=True) == public
    assert adadps.client_payloads(None) == ()
