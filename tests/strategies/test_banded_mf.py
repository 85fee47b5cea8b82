"""Banded MF DP-FTRL as a recipe part (``strategy.noise: {kind: banded_mf}``; Choquette-Choo et al. 2023): what it
is priced at under cyclic Poisson and cyclic fixed-size sampling, calibration against an independent dp-accounting
oracle, the parts it composes with, and each refusal naming its field."""

import math

import dp_accounting as dpa
import pytest

from fedpub.config import ConfigError, parse_config
from fedpub.privacy import CyclicFixedSizeSampling, CyclicPoissonSampling
from fedpub.strategies.build import build_private_strategy

DELTA = 1e-5
CYCLIC = {"kind": "cyclic_poisson", "clients_per_round": 10, "groups": 4}
BANDED = {"kind": "banded_mf", "bands": 4}


def _config(rounds=20, privacy=None, data=None, **strategy):
    strategy = {"noise_multiplier": 1.0, "noise": BANDED, "sampling": CYCLIC, **strategy}
    return parse_config({"rounds": rounds, "strategy": strategy, "privacy": {"delta": DELTA, **(privacy or {})},
                         **({"data": data} if data else {})})


def _build(config, population=400, reproducible=True):
    return build_private_strategy(config.strategy, config.privacy, population=population, rounds=config.rounds,
                                  seed=5, reproducible=reproducible)


def test_a_run_costs_ceil_rounds_over_groups_sampled_gaussians():
    built = _build(_config(rounds=10))
    paid = dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(pytest.approx(1.0)))
    assert built.planned_event == dpa.SelfComposedDpEvent(paid, 3)
    assert [built.core.planned_round_event(t) for t in range(5)] == [paid, *[dpa.NoOpDpEvent()] * 3, paid]
    assert built.core.sampling == CyclicPoissonSampling(0.1, 4) and built.core.expected_cohort == pytest.approx(10)


@pytest.mark.parametrize("factorization", ["bsr", "optimized"])
def test_the_calibrated_multiplier_meets_the_target_by_an_independent_oracle(factorization, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDPUB_CACHE_DIR", str(tmp_path))
    config = _config(rounds=30, noise={**BANDED, "factorization": factorization}, noise_multiplier=None,
                     target_epsilon=3.0)
    z = _build(config).noise_multiplier

    def oracle(multiplier: float) -> float:
        accountant = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
        event = dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(multiplier))  # sensitivity 1: normalised C
        return accountant.compose(dpa.SelfComposedDpEvent(event, math.ceil(30 / 4))).get_epsilon(DELTA)

    assert oracle(z) <= 3.0 < oracle(z - 2e-4)


@pytest.mark.parametrize("strategy", [
    {"name": "dope", "recenter": {}},
    {"name": "adadps", "precondition": {"placement": "server"}},
    {"name": "pda_dpmd", "mirror": {"decay_rounds": 5}},
    {"warm_start": {"epochs": 1}, "adaptive_clip": {"count_noise_std": 2.0},
     "server_optimizer": {"momentum": 0.9}},
])
def test_it_composes_with_the_public_data_parts(strategy):
    built = _build(_config(data={"public": {"fraction": 0.1}}, **strategy))
    names = [name for name, _ in built.core.aggregator.steps]
    assert names[names.index("aggregate") + 1] == "noise"
    paid = built.core.planned_round_event(0)
    assert isinstance(paid, dpa.PoissonSampledDpEvent) and built.core.planned_round_event(1) == dpa.NoOpDpEvent()


def test_on_fixed_size_cohorts_a_run_costs_ceil_rounds_over_groups_samples_without_replacement():
    built = _build(_config(rounds=10, privacy={"accountant": "rdp"},
                           sampling={"kind": "cyclic_fixed", "clients_per_round": 10, "groups": 4}), population=403)
    paid = dpa.SampledWithoutReplacementDpEvent(100, 10, dpa.GaussianDpEvent(pytest.approx(0.5)))
    assert built.planned_event == dpa.SelfComposedDpEvent(paid, 3)
    assert [built.core.planned_round_event(t) for t in range(5)] == [paid, *[dpa.NoOpDpEvent()] * 3, paid]
    assert built.core.sampling == CyclicFixedSizeSampling(403, 10, 4) and built.core.expected_cohort == 10


def test_one_band_runs_on_any_cohort_rule():
    built = _build(_config(noise={**BANDED, "bands": 1}, sampling={"kind": "poisson", "clients_per_round": 10}))
    assert built.planned_event == dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(0.025, dpa.GaussianDpEvent(1.0)), 20)


@pytest.mark.parametrize(("strategy", "message"), [
    ({"sampling": {"kind": "poisson", "clients_per_round": 10}},
     r"^strategy.noise.bands 4 needs each user at most once every 4 rounds: set strategy.sampling.kind: "
     r"cyclic_poisson \(cyclic_fixed for fixed-size cohorts\) with groups >= 4 "
     r"\(got PoissonSampling\(sampling_rate=0.025\)\), or bands: 1$"),
    ({"sampling": {**CYCLIC, "groups": 3}}, r"with groups >= 4 \(got CyclicPoissonSampling"),
    ({"sampling": {"kind": "fixed", "clients_per_round": 10}}, r"with groups >= 4 \(got FixedSizeSampling"),
    ({"sampling": {"kind": "cyclic_fixed", "clients_per_round": 10, "groups": 2}},
     r"with groups >= 4 \(got CyclicFixedSizeSampling"),
    ({"noise": {**BANDED, "bands": 30}, "sampling": {**CYCLIC, "groups": 30, "clients_per_round": 1}},
     r"^strategy.noise.bands 30 exceeds the run's 20 rounds: set bands <= rounds$"),
    ({"noise": {**BANDED, "bands": 1}, "name": "dp_ftrl", "sampling": {"kind": "epoch_blocks", "clients_per_round": 4}},
     r"^strategy.tree_aggregation and strategy.noise both fill the chain's `noise` step: choose one$"),
])
def test_what_does_not_compose_is_refused_naming_the_field(strategy, message):
    with pytest.raises(ValueError, match=message):
        _build(_config(**strategy))


def test_the_secure_sampler_is_refused():
    config = _config(privacy={"noise_sampler": "opendp"})
    with pytest.raises(ValueError, match=r"^privacy.noise_sampler `opendp` does not cover strategy.noise "
                                         r"\(banded_mf\).*use privacy.noise_sampler: torch$"):
        _build(config, reproducible=False)


@pytest.mark.parametrize(("strategy", "section"), [
    ({"budget_schedule": {"boosted_rounds": 2, "boosted_noise_ratio": 0.5}}, "budget_schedule"),
    ({"name": "ppsgd", "target_epsilon": 5.0, "noise_multiplier": None}, "public_schedule"),
])
def test_a_schedule_of_the_noise_multiplier_is_refused_beside_cyclic_sampling(strategy, section):
    with pytest.raises(ConfigError, match=f"cyclic_poisson prices group 0's rounds for every group.*remove {section}"):
        _config(**strategy)


def test_the_section_names_its_fields():
    with pytest.raises(ConfigError, match="kind"):
        _config(noise={"bands": 2})
    with pytest.raises(ConfigError, match="factorization"):
        _config(noise={**BANDED, "factorization": "toeplitz"})
    with pytest.raises(ConfigError, match="bands"):
        _config(noise={**BANDED, "bands": 0})
