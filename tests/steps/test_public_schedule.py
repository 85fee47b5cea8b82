import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedpub import tree
from fedpub.steps.public_schedule import public_schedule, tcdp_noise_ratio
from fedpub.types import RoundContext
from tests.steps.cohorts import cohort

CTX = RoundContext(round=0, seed=0, population=50, sampling_rate=0.1, expected_cohort=5.0, cohort_size=5)
SHAPES = {"w": (4, 3), "b": (3,)}  # d = 15: the noise test's threshold is sqrt(15)·z·C / 5
ARGS = {"budget_growth": 0.44, "clip_decay": 0.25, "noise_test_factor": 1.0, "clip_test_factor": 1.0}


def _public_mean(norm: float) -> dict[str, torch.Tensor]:
    """A public mean of exactly L2 norm ``norm``."""
    mean = {k: torch.zeros(s) for k, s in SHAPES.items()}
    mean["b"][0] = norm
    return mean


def _next(norm: float | None, clip_norm: float = 1.0, z: float = 1.0, **kwargs) -> dict[str, float]:
    step = public_schedule(clip_norm, z, **{**ARGS, **kwargs})
    stacked = cohort({k: torch.ones(2, *s) for k, s in SHAPES.items()})
    public_mean = None if norm is None else _public_mean(norm)
    return step.update(stacked, step.init({}), ctx=CTX, public_mean=public_mean).state


def test_a_weak_public_signal_buys_budget_and_shrinks_the_clip():
    # φ = ϕ = 1 and ‖Δ̄_pub‖ = 1.5 is below both sqrt(d)·z·C/m = sqrt(15)·1·2/5 ≈ 1.55 and C = 2
    state = _next(1.5, clip_norm=2.0)
    assert state["noise_multiplier"] == pytest.approx(1.0 / math.sqrt(1.44))
    assert state["clip_norm"] == pytest.approx(0.75 * 2.0)


def test_a_strong_public_signal_keeps_both():
    state = _next(10.0, clip_norm=2.0)
    assert state == {"clip_norm": 2.0, "noise_multiplier": 1.0}


def test_the_two_tests_are_independent():
    threshold = math.sqrt(15) / 5.0  # z = C = 1
    # between the noise threshold (0.77) and C = 1: only the clip shrinks
    assert _next(0.9) == {"clip_norm": 0.75, "noise_multiplier": 1.0}
    # with ϕ = 0.5 the clip test passes at norm 1.5 < 2 = C/ϕ; the noise test needs ‖·‖ < threshold / φ = 2·threshold
    state = _next(1.5, noise_test_factor=0.5, clip_test_factor=0.5)
    assert state["clip_norm"] == 0.75 and state["noise_multiplier"] == pytest.approx(1 / 1.2)
    assert _next(2.1 * threshold, noise_test_factor=0.5, clip_test_factor=0.5)["noise_multiplier"] == 1.0


def test_the_noise_multiplier_stops_at_its_floor():
    assert _next(0.0, z=0.5, min_noise_multiplier=0.45)["noise_multiplier"] == 0.45
    assert _next(0.0, z=0.2, min_noise_multiplier=0.3)["noise_multiplier"] == 0.2  # the floor never raises z


def test_by_default_there_is_no_floor():
    z = 1.0
    for _ in range(60):  # the paper's schedule: z falls by sqrt(1+α) whenever the public signal is weak
        z = _next(0.0, z=z)["noise_multiplier"]
    assert z == pytest.approx(1.44 ** -30)


def test_the_noise_test_reads_k_times_the_runs_noise():
    threshold = math.sqrt(15) / 5.0  # z = C = 1: the run's own noise norm on the mean
    assert _next(2 * threshold)["noise_multiplier"] == 1.0  # above the run's noise: no more budget
    assert _next(2 * threshold, noise_test_scale=2.5)["noise_multiplier"] < 1.0  # below k = 2.5 times it


def test_the_tcdp_noise_ratio_is_the_papers_std_over_the_runs():
    # ε = 1, δ = 1e-5: ρ_total = 1 + 2L − 2√(L(1 + L)), L = log 1e5 (eq. 3); the paper's std on the mean is
    # (2C/s)/√(2ρ_t^s) with ρ_t^s = (ρ_total/T)/(13q²) (eq. 4); this run's is z·C/s
    log_inv = math.log(1e5)
    rho = 1 + 2 * log_inv - 2 * math.sqrt(log_inv * (1 + log_inv))
    q, steps, z = 0.01, 300, 0.9
    paper_std = 2 / math.sqrt(2 * (rho / steps) / (13 * q * q))  # times C/s
    assert tcdp_noise_ratio(1.0, 1e-5, q, steps, z) == pytest.approx(paper_std / z)
    assert 2.5 < tcdp_noise_ratio(1.0, 1e-5, q, steps, z) < 11


def test_without_a_public_mean_nothing_changes():
    assert _next(None, clip_norm=3.0, z=2.0) == {"clip_norm": 3.0, "noise_multiplier": 2.0}


def test_clips_to_c_t_and_hands_c_t_and_z_t_to_the_noise_step(params, stacked, ctx):
    step = public_schedule(2.0, 1.5, **ARGS)
    result = step.update(cohort(stacked), step.init(params), ctx=ctx, public_mean=_public_mean(0.0))
    norms = result.updates.norms()
    assert bool((norms <= 2.0 * (1 + 1e-6)).all())
    assert result.outputs == {"clip_norm": 2.0, "noise_multiplier": 1.5}
    assert result.metrics["next_clip_norm"] == 1.5 and result.metrics["public_norm"] == 0.0
    assert result.diagnostics["clipped_fraction"] == float((cohort(stacked).norms() > 2.0).double().mean())


def test_a_round_without_a_public_mean_releases_no_public_norm_rather_than_nan(params, stacked, ctx):
    """Every public update refused: the round has no public norm; it is left out, never released as NaN."""
    step = public_schedule(2.0, 1.5, **ARGS)
    result = step.update(cohort(stacked), step.init(params), ctx=ctx, public_mean=None)
    assert "public_norm" not in result.metrics
    assert all(math.isfinite(v) for v in result.metrics.values())


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"budget_growth": 0.0}, "budget_growth"), ({"clip_decay": 1.0}, "clip_decay"),
     ({"noise_test_factor": -1.0}, "noise_test_factor"), ({"clip_test_factor": math.inf}, "clip_test_factor"),
     ({"min_noise_multiplier": -0.1}, "min_noise_multiplier")],
)
def test_invalid_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        public_schedule(1.0, 1.0, **{**ARGS, **kwargs})


@settings(max_examples=40, deadline=None)
@given(scale=st.floats(min_value=1e-3, max_value=1e8), seed=st.integers(0, 10_000),
       clip_norm=st.floats(min_value=0.01, max_value=10.0))
def test_adding_one_user_with_any_update_moves_the_clipped_sum_by_at_most_c(scale, seed, clip_norm):
    g = torch.Generator().manual_seed(seed)
    users = {k: 3.0 * torch.randn(4, *s, generator=g) for k, s in SHAPES.items()}
    newcomer = {k: scale * torch.randn(1, *s, generator=g) for k, s in SHAPES.items()}
    step = public_schedule(clip_norm, 1.0, **ARGS)
    with_user = {k: torch.cat([users[k], newcomer[k]]) for k in SHAPES}
    without = step.update(cohort(users), step.init({}), ctx=CTX).updates.sum()
    added = step.update(cohort(with_user), step.init({}), ctx=CTX).updates.sum()
    assert float(tree.global_norm(tree.sub(added, without))) <= clip_norm * (1 + 1e-5)
