"""An operator's flags to the drop-in strategy are booleans (issue 44, item 9): ``public_nodes="false"`` or
``diagnostics="off"`` are truthy strings that would trust nodes' public declarations or release statistics DP does
not cover, so anything but True/False is refused, naming the argument and the value's type, before any noise is
calibrated."""

from __future__ import annotations

import pytest

from fedpub.strategies.flower import FedpubStrategy

DP_FEDAVG = {"name": "dp_fedavg", "clip_norm": 1.0, "noise_multiplier": 1.0,
             "sampling": {"kind": "poisson", "sampling_rate": 0.5}}


@pytest.mark.parametrize("value", ["false", "False", "off", "no", 0, 1, None, "true", [], 0.0])
def test_public_nodes_that_is_no_boolean_is_refused_naming_it(value):
    with pytest.raises(TypeError, match=rf"^public_nodes= takes True or False, got a {type(value).__name__}$"):
        FedpubStrategy.from_config(DP_FEDAVG, population=4, rounds=2, seed=0, public_nodes=value)


@pytest.mark.parametrize("value", ["false", "off", 0, 1, "yes"])
def test_diagnostics_that_is_no_boolean_is_refused_naming_it(value):
    with pytest.raises(TypeError, match=rf"^diagnostics= takes True or False, got a {type(value).__name__}$"):
        FedpubStrategy.from_config(DP_FEDAVG, population=4, rounds=2, seed=0, diagnostics=value)


def test_booleans_and_the_default_are_taken():
    for diagnostics in (True, False, None):
        strategy = FedpubStrategy.from_config(DP_FEDAVG, population=4, rounds=2, seed=0, diagnostics=diagnostics)
        assert strategy.diagnostics is diagnostics and strategy.public_nodes is False
