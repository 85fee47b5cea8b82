"""Errors that name what to change: a recipe without public users, a budget smaller than one round, a target ε
that buries the signal in noise, a run directory holding another config, a replaced key."""

from __future__ import annotations

import pytest

from fedpub.config import ConfigError, PrivacyConfig, StrategyConfig, parse_config
from fedpub.privacy.errors import BudgetExceededError
from fedpub.simulations.session import changed_keys
from fedpub.strategies.build import NoisyBeyondSignal, build_private_strategy


def test_a_recipe_that_trains_public_users_without_any_is_refused_when_the_config_is_read():
    with pytest.raises(ConfigError, match=r"strategy `dope` trains public users \(strategy.public_clients_per_round"):
        parse_config({"strategy": {"name": "dope", "noise_multiplier": 1.0, "recenter": {}}})
    with pytest.raises(ConfigError, match="strategy.warm_start"):
        parse_config({"strategy": {"noise_multiplier": 1.0, "warm_start": {}}})
    parse_config({"data": {"public": {"fraction": 0.1}}, "strategy": {"noise_multiplier": 1.0, "warm_start": {}}})


def test_a_budget_smaller_than_one_round_names_the_field():
    strategy = StrategyConfig(noise_multiplier=0.5, sampling={"kind": "poisson", "clients_per_round": 50})
    with pytest.raises(BudgetExceededError, match=r"^privacy.budget_epsilon: a single round costs"):
        build_private_strategy(strategy, PrivacyConfig(budget_epsilon=0.01), population=100, rounds=5, seed=0,
                               reproducible=True)


def test_a_target_epsilon_that_drowns_the_mean_in_noise_warns():
    strategy = StrategyConfig(target_epsilon=0.001, sampling={"kind": "poisson", "clients_per_round": 10})
    with pytest.warns(NoisyBeyondSignal, match="exceeds the expected cohort m = 10"):
        build_private_strategy(strategy, PrivacyConfig(), population=100, rounds=20, seed=0, reproducible=True)


def test_a_changed_config_names_the_changed_keys():
    stored = {"rounds": 10, "strategy": {"clip_norm": 1.0, "sampling": {"kind": "poisson"}}, "seed": 0}
    resolved = {"rounds": 10, "strategy": {"clip_norm": 0.5, "sampling": {"kind": "fixed"}}, "seed": 0, "x": 1}
    assert changed_keys(stored, resolved) == ["strategy.clip_norm", "strategy.sampling.kind", "x"]


def test_the_replaced_client_vectorise_is_refused_naming_client_path():
    with pytest.raises(ConfigError, match=r"client.vectorise was replaced by client.path: auto .* \| vectorised \| loop"):
        parse_config({"client": {"vectorise": False}})
    with pytest.raises(ConfigError, match="client.path"):
        parse_config({"client": {"path": "gpu"}})
    assert parse_config({}).client.path == "auto"
