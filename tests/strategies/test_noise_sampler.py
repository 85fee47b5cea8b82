"""privacy.noise_sampler through the strategy builders: the refusal under reproducibility
(fedpub.strategies.common.secure_noise_sampler), DP-FTRL's refusal, and that the secure sampler plans the same events."""

from __future__ import annotations

import importlib.util

import pytest

from fedpub.config import PrivacyConfig, StrategyConfig
from fedpub.privacy.events import EpochBlocks, PoissonSampling
from fedpub.strategies.common import secure_noise_sampler
from fedpub.strategies.compose import build_strategy

needs_opendp = pytest.mark.skipif(importlib.util.find_spec("opendp") is None,
                                  reason="OpenDP (the secure-noise extra) is missing")


def test_the_secure_sampler_is_refused_when_the_run_must_be_reproducible():
    assert secure_noise_sampler("torch", reproducible=True) is False
    assert secure_noise_sampler("torch", reproducible=False) is False
    assert secure_noise_sampler("opendp", reproducible=False) is True
    with pytest.raises(ValueError, match="cannot be seeded|no seed reproduces"):
        secure_noise_sampler("opendp", reproducible=True)
    with pytest.raises(ValueError, match="torch or opendp"):
        secure_noise_sampler("numpy", reproducible=False)


def test_the_config_defaults_to_torch_and_knows_opendp():
    assert PrivacyConfig().noise_sampler == "torch"
    assert PrivacyConfig(noise_sampler="opendp").noise_sampler == "opendp"


@needs_opendp
def test_the_secure_sampler_plans_the_same_events_with_adaptive_clipping():
    config = StrategyConfig(name="dp_fedavg", clip_norm=0.5, noise_multiplier=1.1,
                            adaptive_clip={"target_quantile": 0.5, "learning_rate": 0.2, "count_noise_std": 3.0})
    cores = [build_strategy(config, sampling=PoissonSampling(0.1), population=100, noise_multiplier=1.1, seed=0,
                            rounds=5, secure_sampler=secure) for secure in (False, True)]
    assert cores[0].planned_event(5) == cores[1].planned_event(5)


def test_dp_ftrl_refuses_the_secure_sampler():
    config = StrategyConfig(name="dp_ftrl", clip_norm=0.5, noise_multiplier=1.1, tree_aggregation={},
                            sampling={"kind": "epoch_blocks", "clients_per_round": 4})
    with pytest.raises(ValueError, match="does not cover strategy.tree_aggregation"):
        build_strategy(config, sampling=EpochBlocks(30, 4), population=30, noise_multiplier=1.1, seed=0, rounds=8,
                       secure_sampler=True)
