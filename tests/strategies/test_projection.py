"""Public-subspace projection as a recipe (strategies/projection.py): one private user moves the noisy sum by at
most C; with ``noise_space: subspace`` the released noise lies in span(V) with std z·C/m along each of its
directions (ambient: also outside it); a round's event and the run's ε are dp_accounting's for DP-FedAvg's
Gaussian; the config switches it on with ``pdp`` and refuses a k above the public cohort."""

from __future__ import annotations

import math

import dp_accounting
import pytest
import torch
from dp_accounting.rdp import rdp_privacy_accountant

from fedpub import recipe_registry
from fedpub.config import PrivacyConfig, StrategyConfig
from fedpub.privacy.events import PoissonSampling
from fedpub.steps.project import top_subspace
from fedpub.strategies.build import build_private_strategy
from fedpub.strategies.compose import build_strategy
from tests.steps.cohorts import cohort

SHAPES = {"w": (8, 5), "b": (5,)}
POPULATION, PER_ROUND, K, Z, C, DELTA = 100, 10, 3, 1.3, 0.5, 1e-5
M = PER_ROUND  # the expected cohort of Poisson sampling at q = 10/100


def _config(**overrides) -> StrategyConfig:
    return StrategyConfig(**{"name": "pdp", "clip_norm": C, "noise_multiplier": Z,
                             "sampling": {"clients_per_round": PER_ROUND}, "projection": {"k": K}, **overrides})


def _core(config: StrategyConfig, seed: int = 0):
    return build_strategy(config, sampling=PoissonSampling(PER_ROUND / POPULATION), population=POPULATION,
                          noise_multiplier=config.noise_multiplier, seed=seed, rounds=5)


def _updates(rows: int, seed: int, scale: float = 1.0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{k: scale * torch.randn(s, generator=g) for k, s in SHAPES.items()} for _ in range(rows)]


def _flat(update) -> torch.Tensor:
    return torch.cat([update[k].reshape(-1) for k in SHAPES]).double()


PARAMS = {k: torch.zeros(s) for k, s in SHAPES.items()}
PUBLIC = _updates(6, seed=1)


def _basis() -> torch.Tensor:
    stacked = {k: torch.stack([u[k] for u in PUBLIC]) for k in SHAPES}
    basis = top_subspace(cohort(stacked), K)
    return torch.cat([basis[k].reshape(K, -1) for k in SHAPES], dim=1).double()


def _mean(core, private, state, round_index=0):
    """The released mean (the server's SGD at lr 1 from zero parameters) and the new state."""
    outcome = core.aggregate(PARAMS, private, state, round_index, public_updates=PUBLIC)
    return _flat(outcome.params), outcome


@pytest.mark.parametrize("noise_space", ["ambient", "subspace"])
def test_one_private_user_moves_the_noisy_sum_by_at_most_c(noise_space):
    core = _core(_config(projection={"k": K, "noise_space": noise_space}))
    private = _updates(5, seed=2, scale=3.0)
    for extra in (_updates(1, seed=3, scale=100.0)[0], _updates(1, seed=4, scale=1e-3)[0]):
        without, _ = _mean(core, private, core.init(PARAMS))
        with_user, _ = _mean(core, [*private, extra], core.init(PARAMS))  # the same seed: the same noise
        assert float((with_user - without).norm()) * M <= C * (1 + 1e-5)
    far, _ = _mean(core, [*private, _updates(1, seed=3, scale=100.0)[0]], core.init(PARAMS))
    assert float((far - without).norm()) * M == pytest.approx(C, rel=1e-4)  # clipped to C, in span(V)


@pytest.mark.parametrize("noise_space", ["ambient", "subspace"])
def test_the_released_noise_has_std_zc_over_m_in_the_subspace_and_lies_in_it_with_noise_space_subspace(
    noise_space,
):
    """900 noise coordinates along the basis (300 rounds × k = 3): their sample std is within 10% of z·C/m (the
    sample std of 900 normals has a relative spread of 2.4%, so a wrong scale fails and a right one passes but
    for a 4-sigma draw)."""
    core = _core(_config(projection={"k": K, "noise_space": noise_space}))
    quiet = _core(_config(projection={"k": K, "noise_space": noise_space}, noise_multiplier=0.0))
    private = _updates(4, seed=5)
    signal, _ = _mean(quiet, private, quiet.init(PARAMS))
    v = _basis()
    state, inside, outside = core.init(PARAMS), [], []
    for t in range(300):
        mean, outcome = _mean(core, private, state, t)
        state = outcome.state
        noise = mean - signal
        coordinates = v @ noise
        inside.append(coordinates)
        outside.append(noise - v.T @ coordinates)
    std = Z * C / M
    assert float(torch.cat(inside).std()) == pytest.approx(std, rel=0.10)
    residual = torch.stack(outside)
    if noise_space == "subspace":
        assert float(residual.abs().max()) < 1e-5 * std
    else:  # d − k = 42 directions outside, each of std z·C/m
        per_direction = float(residual.pow(2).sum(dim=1).mean() / (v.shape[1] - K)) ** 0.5
        assert per_direction == pytest.approx(std, rel=0.05)


def test_a_round_releases_dp_fedavgs_event_and_the_run_dp_accountings_epsilon():
    config = _config(noise_multiplier=None, target_epsilon=2.0, projection={"k": K, "noise_space": "subspace"})
    built = build_private_strategy(config, PrivacyConfig(delta=DELTA, accountant="rdp"), population=POPULATION,
                                   rounds=20, seed=0, reproducible=True)
    z, q = built.noise_multiplier, PER_ROUND / POPULATION
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    outcome = built.core.aggregate(PARAMS, _updates(4, seed=6), built.core.init(PARAMS), 0, public_updates=PUBLIC)
    assert outcome.event == event == built.core.planned_round_event(0)
    assert outcome.metrics["project/projected"] == 1.0 and outcome.metrics["project/rank"] == K
    reference = rdp_privacy_accountant.RdpAccountant().compose(event, 20)
    fresh = built.new_accountant()
    fresh.compose(built.planned_event)
    assert fresh.epsilon(DELTA) == pytest.approx(reference.get_epsilon(DELTA))
    assert 2.0 - 1e-3 <= fresh.epsilon(DELTA) <= 2.0
    plain = build_private_strategy(_config(name="dp_fedavg", projection=None, noise_multiplier=None,
                                           target_epsilon=2.0), PrivacyConfig(delta=DELTA, accountant="rdp"),
                                   population=POPULATION, rounds=20, seed=0, reproducible=True)
    assert math.isclose(plain.noise_multiplier, z)  # the projection changes nothing in the accounting


def test_without_public_updates_a_round_is_dp_fedavgs():
    private = _updates(4, seed=7)
    core, plain = _core(_config()), _core(_config(name="dp_fedavg", projection=None))
    outcome = core.aggregate(PARAMS, private, core.init(PARAMS), 0)
    assert outcome.metrics["project/projected"] == 0.0
    reference = plain.aggregate(PARAMS, private, plain.init(PARAMS), 0)
    assert all(torch.equal(v, reference.params[k]) for k, v in outcome.params.items())


def test_the_config_switches_it_on_with_pdp_and_refuses_what_cannot_run():
    config = StrategyConfig(name="pdp", noise_multiplier=1.0)
    assert config.projection.k == 10 and config.projection.noise_space == "ambient"
    assert config.public_clients_per_round == 10
    with pytest.raises(ValueError, match=r"strategy.projection.k \(12\) exceeds strategy.public_clients_per_round"):
        _core(_config(projection={"k": 12}, public_clients_per_round=10))
    with pytest.raises(ValueError, match="noise_space"):
        _config(projection={"noise_space": "tangent"})
    for transport in recipe_registry.ON_DEVICE:  # the basis is a per-user value a device is sent
        recipe_registry.check_transport(_config(), transport)
    with pytest.raises(ValueError, match="which projection combines with them: use placement `server`"):
        _config(precondition={"placement": "client"})
    composed = [name for name, _ in _core(_config(name="dope", projection={"k": K, "noise_space": "subspace"},
                                                  precondition={"placement": "server"})).aggregator.steps]
    assert composed == ["precondition", "recenter", "project", "clip", "aggregate", "noise", "project_noise",
                        "add_center", "server_opt"]
