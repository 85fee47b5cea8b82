"""The privacy invariants of every public-data strategy (and of them composed), and their
degenerate reductions to DP-FedAvg (docs/design.md §3–§4).

- adding one private user with an arbitrary update moves the pre-noise sum by at most C_t;
- public inputs never change the accounted event;
- the accounted event per round is the Gaussian of the z_t whose noise was actually added
  (heterogeneous z for PPSGD and budget schedules);
- DOPE with a zero center, AdaDPS with A = 1 and PDA-DPMD with α = 1 are DP-FedAvg exactly.
"""

from __future__ import annotations

import math

import dp_accounting
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpub import tree
from fedpub.config import StrategyConfig
from fedpub.privacy.events import PoissonSampling
from fedpub.cohort_updates import Cohort
from fedpub.step import named_chain
from fedpub.types import RoundContext
from fedpub.strategies.build_context import BuildContext
from fedpub.strategies.compose import build_strategy, strategy_steps

SHAPES = {"w": (6, 4), "b": (4,)}
POPULATION, COHORT, ROUNDS, Z = 100, 5, 10, 0.9

RECIPES = {
    "dp_fedavg": {},
    "dope": {"name": "dope", "recenter": {"center_clip": 2.0}},
    "dope_extended": {"name": "dope", "recenter": {"extended": True}},
    "adadps_server": {"name": "adadps", "precondition": {"placement": "server"}},
    "adadps_client": {"name": "adadps"},
    "pda_dpmd": {"name": "pda_dpmd", "mirror": {"decay_rounds": 4, "alpha_floor": 0.2}},
    "pda_dpmd_no_public_term": {"name": "pda_dpmd", "mirror": {"decay_rounds": 4, "public_term": False}},
    "ppsgd": {"name": "ppsgd", "public_schedule": {"budget_growth": 0.5, "clip_decay": 0.2, "noise_reference": "run"}},
    "budget_schedule": {"budget_schedule": {"boosted_rounds": 2, "boosted_noise_multiplier": 0.5}},
    "composed": {"name": "dope", "precondition": {"placement": "server"}, "mirror": {}, "warm_start": {}},
}


def _config(overrides: dict, clip_norm: float = 1.0, z: float = Z) -> StrategyConfig:
    return StrategyConfig(**{"clip_norm": clip_norm, "noise_multiplier": z, **overrides})


def _core(overrides: dict, *, clip_norm: float = 1.0, z: float = Z, seed: int = 0, side_information=None):
    return build_strategy(
        _config(overrides, clip_norm, z), sampling=PoissonSampling(COHORT / POPULATION), population=POPULATION,
        noise_multiplier=z, seed=seed, rounds=ROUNDS, side_information=side_information,
    )


def _random_tree(seed: int, scale: float = 1.0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: scale * torch.randn(s, generator=g) for k, s in SHAPES.items()}


def _zeros() -> dict[str, torch.Tensor]:
    return {k: torch.zeros(s) for k, s in SHAPES.items()}


def _cohort(updates: list[dict[str, torch.Tensor]]) -> Cohort:
    return Cohort(updates, _zeros())


@pytest.mark.parametrize("recipe", sorted(RECIPES))
@settings(max_examples=15, deadline=None)
@given(scale=st.floats(min_value=1e-3, max_value=1e8), public_scale=st.floats(min_value=1e-4, max_value=1e3),
       seed=st.integers(0, 10_000))
def test_adding_one_user_moves_the_pre_noise_sum_by_at_most_c_t(recipe, scale, public_scale, seed):
    params = _zeros()
    public = [_random_tree(seed + 50 + i, public_scale) for i in range(3)]
    cohort = [_random_tree(seed + i, 3.0) for i in range(4)]
    newcomer = _random_tree(seed + 100, scale)
    core = _core(RECIPES[recipe])
    state = core.aggregate(params, cohort, core.init(params), 0, public_updates=public).state  # C, z, A move
    steps = strategy_steps(BuildContext(_config(RECIPES[recipe]), PoissonSampling(COHORT / POPULATION), POPULATION, Z,
                                        0, ROUNDS))
    names = [name for name, _ in steps]
    pre_noise = named_chain(*steps[: names.index("noise")])
    ctx = RoundContext(round=1, seed=0, population=POPULATION, sampling_rate=COHORT / POPULATION,
                       expected_cohort=COHORT, cohort_size=5, num_public=3)
    inputs = {"public_mean": tree.mean(public), "public_updates": _cohort(public)}
    prefix_state = {name: state[name] for name in names[: names.index("noise")]}
    without = pre_noise.update(_cohort(cohort), prefix_state, ctx=ctx, **inputs)
    with_user = pre_noise.update(_cohort(cohort + [newcomer]), prefix_state, ctx=ctx, **inputs)
    clip_t = without.outputs["clip_norm"]
    assert with_user.outputs["clip_norm"] == clip_t
    moved_sum = float(tree.global_norm(tree.sub(with_user.updates, without.updates))) * COHORT  # mean × m
    assert moved_sum <= clip_t * (1 + 1e-5)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_public_inputs_do_not_enter_the_accountant_and_the_event_is_the_noise_added(recipe):
    params = _random_tree(0)
    cohort = [_random_tree(s, 2.0) for s in range(1, 6)]
    q = COHORT / POPULATION
    states = {}
    for label, public in {"none": [], "small": [_random_tree(9, 1e-4)], "large": [_random_tree(9, 50.0)] * 3}.items():
        core = _core(RECIPES[recipe])
        state = core.init(params)
        events = []
        for t in range(4):
            outcome = core.aggregate(params, cohort, state, t, public_updates=public)
            z_t = outcome.metrics["noise/noise_multiplier"]
            c_t = outcome.metrics["clip/clip_norm"]
            assert outcome.event == dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z_t))
            assert outcome.metrics["noise/noise_std"] == pytest.approx(z_t * c_t / COHORT)
            events.append(outcome.event)
            state = outcome.state
        states[label] = events
    if recipe != "ppsgd":  # PPSGD's z_{t+1} is steered by the public mean: post-processing of public data
        assert states["none"] == states["small"] == states["large"]
    else:
        z = [e.event.noise_multiplier for e in states["small"]]
        assert z[0] == Z and z[1] < z[0]  # a tiny public update: spend more budget next round
        assert [e.event.noise_multiplier for e in states["none"]] == [Z] * 4


def test_the_budget_schedule_noises_the_boosted_rounds_with_their_z():
    core = _core(RECIPES["budget_schedule"])
    params = _zeros()
    state, zs = core.init(params), []
    for t in range(ROUNDS):
        outcome = core.aggregate(params, [_random_tree(t)], state, t)
        state = outcome.state
        zs.append(outcome.event.event.noise_multiplier)
    assert zs == [0.5, 0.5] + [Z] * (ROUNDS - 2)
    last = _core({"budget_schedule": {"boosted_rounds": 3, "boosted_noise_multiplier": 0.5, "position": "last"}})
    state, zs = last.init(params), []
    for t in range(ROUNDS):
        outcome = last.aggregate(params, [_random_tree(t)], state, t)
        state = outcome.state
        zs.append(outcome.event.event.noise_multiplier)
    assert zs == [Z] * (ROUNDS - 3) + [0.5] * 3


def test_ppsgd_noise_actually_added_follows_the_scheduled_z():
    shapes = {"w": (400, 500)}  # 200,000 coordinates for a 1% std estimate
    params = {"w": torch.zeros(shapes["w"])}
    core = build_strategy(
        _config(RECIPES["ppsgd"]), sampling=PoissonSampling(COHORT / POPULATION), population=POPULATION,
        noise_multiplier=Z, seed=3, rounds=ROUNDS,
    )
    tiny_public = [{"w": torch.full(shapes["w"], 1e-6)}]
    first = core.aggregate(params, [], core.init(params), 0, public_updates=tiny_public)
    z_1, c_1 = first.metrics["clip/next_noise_multiplier"], first.metrics["clip/next_clip_norm"]
    assert z_1 == pytest.approx(Z / math.sqrt(1.5)) and c_1 == pytest.approx(0.8)
    second = core.aggregate(params, [], first.state, 1)  # no public mean: the step is the noise alone
    assert second.event.event.noise_multiplier == pytest.approx(z_1)
    measured = float(second.params["w"].std())
    assert measured == pytest.approx(z_1 * c_1 / COHORT, rel=0.01)


def _assert_same_round(core_a, core_b, *, public):
    params = _random_tree(0)
    cohort = [_random_tree(s, 2.0) for s in range(1, 6)]
    state_a, state_b = core_a.init(params), core_b.init(params)
    for t in range(3):
        a = core_a.aggregate(params, cohort, state_a, t, public_updates=public)
        b = core_b.aggregate(params, cohort, state_b, t, public_updates=public)
        for k in params:
            assert torch.equal(a.params[k], b.params[k]), f"round {t}, {k}"
        assert a.event == b.event
        state_a, state_b, params = a.state, b.state, a.params


def test_adadps_with_a_unit_preconditioner_is_dp_fedavg_exactly():
    ones = {k: torch.ones(s) for k, s in SHAPES.items()}
    adadps = _core({"name": "adadps", "precondition": {"source": "token_frequency", "placement": "server"}},
                   seed=4, side_information=ones)
    _assert_same_round(adadps, _core({}, seed=4), public=[])


def test_pda_dpmd_with_alpha_one_is_dp_fedavg_exactly():
    mirror = _core({"name": "pda_dpmd", "mirror": {"alpha_floor": 1.0}}, seed=4)
    _assert_same_round(mirror, _core({}, seed=4), public=[_random_tree(7, 3.0)])


def test_pda_dpmd_without_the_public_term_is_alpha_damped_dp_fedavg_with_its_accounting():
    """The control α-damped DP-FedAvg: each round's step is α_t times DP-FedAvg's noisy mean (the same cohort and
    noise from the same seed), priced as DP-FedAvg's, and it trains no public users."""
    config = _config({"name": "pda_dpmd", "mirror": {"decay_rounds": 4, "public_term": False}})
    assert config.public_clients_per_round == 0 and config.warm_start is not None
    damped, plain = _core(config.model_dump(), seed=4), _core({}, seed=4)
    assert damped.public_cohort == 0 and damped.planned_event(ROUNDS) == plain.planned_event(ROUNDS)
    params = _random_tree(0)
    cohort = [_random_tree(s, 2.0) for s in range(1, 6)]
    state_d, state_p = damped.init(params), plain.init(params)
    for t in range(3):
        d = damped.aggregate(params, cohort, state_d, t, public_updates=[_random_tree(7, 3.0)])
        p = plain.aggregate(params, cohort, state_p, t)
        alpha = math.cos(math.pi * t / 8)
        assert d.event == p.event and d.metrics["mirror/alpha"] == pytest.approx(alpha)
        for k in params:
            torch.testing.assert_close(d.params[k] - params[k], alpha * (p.params[k] - params[k]))
        state_d, state_p, params = d.state, p.state, d.params


def test_dope_with_a_zero_center_is_dp_fedavg_exactly_in_extended_mode_too():
    dope = _core({"name": "dope", "recenter": {"extended": False}}, seed=4)
    _assert_same_round(dope, _core({}, seed=4), public=[_zeros()] * 2)
