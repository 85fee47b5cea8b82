"""Errors that name what to change: a recipe without public users, a budget smaller than one round, a target ε
that buries the signal in noise, δ not below 1/N, a non-finite hyper-parameter, a run directory holding another
config, a replaced key, a key given twice, a scalar of another kind (a boolean for a number, a number or text for a
boolean), a run name that is not one folder."""

from __future__ import annotations

import math
import re

import warnings

import pytest
import torch

from fedpub.config import ConfigError, PrivacyConfig, StrategyConfig, load_config, parse_config
from fedpub.privacy.errors import BudgetExceededError, PrivacyError
from fedpub.simulations.run.session import changed_keys
from fedpub.round_driver import NoisyBeyondSignal, RoundDriver, noise_beyond_signal
from fedpub.strict_yaml import load_yaml
from fedpub.strategies.build import build_private_strategy


def test_a_recipe_that_trains_public_users_without_any_is_refused_when_the_config_is_read():
    with pytest.raises(ConfigError, match=r"strategy `dope` trains public users \(strategy.public_clients_per_round"):
        parse_config({"strategy": {"name": "dope", "noise_multiplier": 1.0, "recenter": {}}})
    with pytest.raises(ConfigError, match="strategy.warm_start"):
        parse_config({"strategy": {"noise_multiplier": 1.0, "warm_start": {}}})
    parse_config({"data": {"public": {"fraction": 0.1}}, "strategy": {"noise_multiplier": 1.0, "warm_start": {}}})


def test_a_side_information_field_of_another_profile_is_refused_naming_it():
    """Setting the power of a top_k A (or the frequent words of a power A) would change nothing: refused, naming the
    field and the profile that uses it; each profile's own fields are legal."""
    def precondition(**fields):
        return {"strategy": {"name": "adadps", "noise_multiplier": 1.0,
                             "precondition": {"source": "token_frequency", **fields}}}

    with pytest.raises(ConfigError, match=r"power shape A under another profile than 'top_k'.*set profile to power"):
        parse_config(precondition(profile="top_k", power=0.5))
    with pytest.raises(ConfigError, match=r"frequent_words, rare_scale shape A under another profile than 'power'"):
        parse_config(precondition(frequent_words=50, rare_scale=100.0))
    config = parse_config(precondition(profile="top_k", frequent_words=50, rare_scale=100.0))
    assert (config.strategy.precondition.frequent_words, config.strategy.precondition.rare_scale) == (50, 100.0)
    parse_config(precondition(power=0.5, floor=0.1))


def test_a_budget_smaller_than_one_round_names_the_field():
    strategy = StrategyConfig(noise_multiplier=0.5, sampling={"kind": "poisson", "clients_per_round": 50})
    with pytest.raises(BudgetExceededError, match=r"^privacy.budget_epsilon: a single round costs"):
        build_private_strategy(strategy, PrivacyConfig(budget_epsilon=0.01), population=100, rounds=5, seed=0,
                               reproducible=True)


def test_noise_that_buries_the_signal_warns_at_the_first_round_whatever_the_entry_point():
    """The round driver every backend shares warns once, when the model's size is known: noise z·√d/m·C a round,
    √T times that over the run, against at most T·C of signal."""
    strategy = StrategyConfig(target_epsilon=4.0, sampling={"kind": "poisson", "clients_per_round": 10})
    built = build_private_strategy(strategy, PrivacyConfig(), population=100, rounds=2, seed=0, reproducible=True)
    params = {"w": torch.zeros(100, 100)}  # d = 10,000: z·√d/m ≫ √2
    driver = RoundDriver(built.core, built.new_accountant(), private_ids=[f"u{i}" for i in range(100)],
                         delta=1e-5, planned_rounds=2, noise_multiplier=built.noise_multiplier)
    state = built.core.init(params)
    with pytest.warns(NoisyBeyondSignal, match=r"d = 10000 dimensions .* over the 2 planned rounds") as caught:
        outcome = driver.finish(driver.plan(0, state), params, state, {})
        driver.finish(driver.plan(1, outcome.state), outcome.params, outcome.state, {})
    assert len([w for w in caught if w.category is NoisyBeyondSignal]) == 1  # once a run
    assert noise_beyond_signal(1.0, 100, 1000, 1_000_000) is None  # z·√d/m = 10 < √T ≈ 31.6: a normal run


def test_noise_confined_to_the_public_subspace_is_weighed_in_its_k_dimensions():
    """Projection with ``noise_space: subspace`` releases noise in k dimensions, not the model's d: the check
    that warned for d = 10,000 above stays silent for k = 2 (z·√2/m < √T) and warns where k is large enough."""
    def first_round_warnings(k: int, noise_space: str) -> list[str]:
        strategy = StrategyConfig(name="pdp", target_epsilon=4.0, public_clients_per_round=k,
                                  projection={"k": k, "noise_space": noise_space},
                                  sampling={"kind": "poisson", "clients_per_round": 10})
        built = build_private_strategy(strategy, PrivacyConfig(), population=100, rounds=2, seed=0, reproducible=True)
        assert built.core.noise_dimensions == (k if noise_space == "subspace" else None)
        params = {"w": torch.zeros(100, 100)}
        driver = RoundDriver(built.core, built.new_accountant(), private_ids=[f"u{i}" for i in range(100)],
                             public_ids=[f"p{i}" for i in range(k)], delta=1e-5, planned_rounds=2,
                             noise_multiplier=built.noise_multiplier)
        with warnings.catch_warnings(record=True) as caught:  # the public users give nothing: DP-FedAvg's round
            warnings.simplefilter("always")
            state = built.core.init(params)
            driver.finish(driver.plan(0, state), params, state, {})
        return [str(w.message) for w in caught if w.category is NoisyBeyondSignal]

    assert first_round_warnings(2, "subspace") == []
    assert first_round_warnings(2, "ambient") and "d = 10000 dimensions" in first_round_warnings(2, "ambient")[0]
    (said,) = first_round_warnings(5000, "subspace")
    assert "d = 5000 dimensions" in said


def test_a_delta_not_below_one_over_n_is_refused_naming_the_rule_and_the_fix():
    strategy = StrategyConfig(noise_multiplier=1.0, sampling={"kind": "poisson", "clients_per_round": 10})
    with pytest.raises(PrivacyError, match=r"privacy.delta 0.05 is not below 1/N = 1/40 = 0.025 .* e.g. 0.001"):
        build_private_strategy(strategy, PrivacyConfig(delta=0.05), population=40, rounds=3, seed=0,
                               reproducible=True)
    with pytest.raises(PrivacyError, match="privacy.delta 0.025 is not below 1/N"):  # δ = 1/N itself
        build_private_strategy(strategy, PrivacyConfig(delta=0.025), population=40, rounds=3, seed=0,
                               reproducible=True)
    build_private_strategy(strategy, PrivacyConfig(delta=0.02), population=40, rounds=3, seed=0, reproducible=True)


@pytest.mark.parametrize(("field", "raw"), [
    ("client.lr", {"client": {"lr": math.inf}}),
    ("client.lr", {"client": {"lr": math.nan}}),
    ("strategy.noise_multiplier", {"strategy": {"noise_multiplier": math.inf}}),
    ("strategy.server_optimizer.lr", {"strategy": {"noise_multiplier": 1.0, "server_optimizer": {"lr": math.inf}}}),
    ("strategy.target_epsilon", {"strategy": {"target_epsilon": math.inf}}),
    ("privacy.budget_epsilon", {"privacy": {"budget_epsilon": math.inf}}),
    ("client.timeout_s", {"client": {"timeout_s": math.inf}}),
    ("strategy.clip_norm", {"strategy": {"noise_multiplier": 0.0, "clip_norm": math.nan}}),
])
def test_a_non_finite_hyper_parameter_is_refused_naming_the_field(field, raw):
    with pytest.raises(ConfigError, match=rf"field `{re.escape(field)}`"):
        parse_config(raw)


def test_the_documented_infinities_stay_legal():
    fedavg = parse_config({"strategy": {"noise_multiplier": 0.0, "clip_norm": math.inf}})  # C = ∞, z = 0: FedAvg
    assert math.isinf(fedavg.strategy.clip_norm)
    dope = parse_config({"data": {"public": {"fraction": 0.1}},
                         "strategy": {"name": "dope", "noise_multiplier": 1.0, "recenter": {"center_clip": math.inf}}})
    assert math.isinf(dope.strategy.recenter.center_clip)


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


def test_a_key_given_twice_is_refused_naming_the_file_the_key_and_the_lines(tmp_path):
    """Issue 44.2: ``noise_multiplier: 0.8`` then ``noise_multiplier: 0.05`` ran at z = 0.05."""
    path = tmp_path / "twice.yaml"
    path.write_text("rounds: 3\nrounds: 4\n")
    with pytest.raises(ConfigError, match=r"twice.yaml: not valid YAML: duplicate key `rounds` \(line 2; first given "
                                          r"on line 1\)"):
        load_config(path)
    path.write_text("strategy:\n  noise_multiplier: 0.8\n  clip_norm: 1\n  noise_multiplier: 0.05\n")
    with pytest.raises(ConfigError, match=r"duplicate key `strategy.noise_multiplier` \(line 4; first given on line 2"):
        load_config(path)
    path.write_text("strategy: {noise_multiplier: 0.8}\n")
    with pytest.raises(ConfigError, match=r"--set .*duplicate key `sampling.kind`"):
        load_config(path, ["strategy={sampling: {kind: poisson, kind: fixed}}"])
    path.write_text("base: &b {noise_multiplier: 0.8, clip_norm: 1}\nstrategy:\n  <<: *b\n  noise_multiplier: 0.5\n")
    raw = load_yaml(path.read_text())  # a merge key's mapping is overridden, as YAML means it
    assert raw["strategy"] == {"noise_multiplier": 0.5, "clip_norm": 1}


@pytest.mark.parametrize("field, value, says", [
    ("strategy.noise_multiplier", True, "a boolean is not a number"),
    ("strategy.clip_norm", False, "a boolean is not a number"),
    ("rounds", True, "a boolean is not a number"),
    ("strategy.clip_norm", "yes", "valid number"),
    ("tracking.tensorboard", 1, "give true or false"),
    ("tracking.tensorboard", "yes", "give true or false"),
    ("data.preload", "1", "give true or false"),
    ("data.preload", 0.0, "give true or false"),
])
def test_a_scalar_of_another_kind_is_refused_naming_the_field(field, value, says):
    """pydantic's lax mode read true as z = 1.0 and "yes", "on", 1 or "1" as a boolean."""
    section, _, key = field.rpartition(".")
    raw: dict = {"strategy": {"noise_multiplier": 1.0}}
    (raw.setdefault(section, {}) if section else raw)[key] = value
    with pytest.raises(ConfigError, match=rf"field `{re.escape(field)}`: .*{says}"):
        parse_config(raw)


def test_numbers_and_yaml_booleans_stay_legal(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("strategy: {clip_norm: 1, noise_multiplier: 1e-1}\ntracking: {tensorboard: yes}\n")
    config = load_config(path)  # an int for a float, a number PyYAML reads as text, YAML 1.1's yes
    assert config.strategy.clip_norm == 1.0 and config.strategy.noise_multiplier == 0.1
    assert config.tracking.tensorboard is True


@pytest.mark.parametrize("name", ["..", ".", "a/b", "a\\b", "/tmp"])
def test_a_run_name_that_is_not_one_folder_is_refused(name):
    with pytest.raises(ConfigError, match="field `name`"):
        parse_config({"name": name})
