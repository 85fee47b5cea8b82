"""The PPSGD synthetic reproduction (seed 004, Figure 3): data, accounting, the DP-SGD reduction, outputs."""

from __future__ import annotations

import csv
import math

import dp_accounting
import pytest
import torch
from dp_accounting.pld import accountant as pld_accountant
from dp_accounting.pld import privacy_loss_distribution
from dp_accounting.pld.common import DifferentialPrivacyParameters

from fedpub.config import PublicScheduleConfig
from fedpub.privacy.accountant import UserLevelAccountant
from fedpub.privacy.calibration import calibrate_noise_multiplier
from fedpub.privacy.events import PoissonSampling
from fedpub.simulations.reproductions import ppsgd_synthetic as ppsgd
from fedpub.simulations.reproductions.results_record import VERDICTS, read_claims_json
from fedpub.simulations.reproductions.tuning import Tuning


SMALL = {"dim": 20, "num_private": 400, "num_public": 20, "num_test": 200, "num_validation": 100}
SETUP = ppsgd.Setup(batch_size=40, planned_steps=30)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One calibration cache for the module's runs (they share (ε, q, T))."""
    return tmp_path_factory.mktemp("calibration")


@pytest.mark.parametrize("loss", ppsgd.LOSSES)
def test_data_shapes_labels_and_determinism(loss):
    data = ppsgd.make_data(loss, seed=3)
    assert data.private_x.shape == (9950, 100) and data.public_x.shape == (50, 100)
    assert data.test_x.shape == (10_000, 100) and data.private_y.shape == (9950,)
    assert data.validation_x.shape == (2000, 100)
    assert torch.allclose(data.private_x.norm(dim=1), torch.ones(9950, dtype=torch.float64))
    if loss == "hinge":
        assert set(data.private_y.tolist()) == {-1.0, 1.0}
    else:
        assert data.private_y.abs().max() <= 1.0 and data.private_y.std() > 0.1
    again, other = ppsgd.make_data(loss, seed=3), ppsgd.make_data(loss, seed=4)
    assert all(torch.equal(a, b) for a, b in zip(vars(data).values(), vars(again).values()) if torch.is_tensor(a))
    assert not torch.equal(data.private_x, other.private_x)
    other_loss = ppsgd.make_data("square" if loss == "hinge" else "hinge", seed=3)
    assert torch.equal(data.private_x, other_loss.private_x)  # same features, the loss only sets the labels


@pytest.mark.parametrize("loss", ppsgd.LOSSES)
def test_regularized_erm_is_the_minimiser(loss):
    data = ppsgd.make_data(loss, seed=0, **SMALL)
    x, y, anchor = data.public_x, data.public_y, torch.full((20,), 0.3, dtype=torch.float64)

    def objective(w: torch.Tensor) -> float:
        margin = x @ w
        losses = torch.clamp(1 - y * margin, min=0) if loss == "hinge" else (y - margin) ** 2
        return float(losses.mean() + 0.1 * ((w - anchor) ** 2).sum())

    w = ppsgd.regularized_erm(loss, x, y, 0.1, anchor)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        assert objective(w) <= objective(w + 1e-3 * torch.randn(20, generator=gen, dtype=torch.float64)) + 1e-9


def test_ppsgd_spends_at_most_the_target_and_accounts_the_z_it_used(cache_dir):
    data = ppsgd.make_data("hinge", seed=0, **SMALL)
    schedule = PublicScheduleConfig(noise_test_factor=1.0)  # the paper's α, β, φ; no floor
    run = ppsgd.private_sgd("hinge", data.private_x, data.private_y, target_epsilon=1.0, setup=SETUP, seed=1,
                            schedule=schedule, public=(data.public_x, data.public_y), cache_dir=cache_dir)
    zs = run.noise_multipliers
    assert len(set(zs)) > 1 and all(b < a for a, b in zip(zs, zs[1:]) if b != a)  # the budget grew
    assert 0 < run.steps < SETUP.planned_steps and run.epsilon <= 1.0
    q = SETUP.batch_size / 400
    assert run.sampling.sampling_rate == q

    def event(z: float) -> dp_accounting.DpEvent:
        return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))

    recomputed = UserLevelAccountant("pld", pld_discretization=SETUP.pld_discretization)
    for z in zs:
        recomputed.compose(event(z))
    assert recomputed.ledger == run.accountant.ledger
    assert recomputed.epsilon(SETUP.delta) == pytest.approx(run.epsilon)
    for z, c, std in zip(zs, run.clip_norms, run.noise_stds):
        assert std == pytest.approx(z * c / SETUP.batch_size)
    # it stopped because the next step (at the last z, or lower) would have exceeded the target
    assert run.accountant.epsilon_if(event(zs[-1] / math.sqrt(1.3)), SETUP.delta) > 1.0


def test_disabled_schedule_without_reuse_is_dpsgd_on_the_private_data(cache_dir):
    data = ppsgd.make_data("square", seed=0, **SMALL)
    frozen = PublicScheduleConfig(noise_test_factor=1.0, clip_test_factor=1e12,
                                  min_noise_multiplier=1e9)  # the budget never grows, the clip never shrinks
    kwargs = {"target_epsilon": 1.0, "setup": SETUP, "seed": 5, "cache_dir": cache_dir}
    ppsgd_run = ppsgd.private_sgd("square", data.private_x, data.private_y, schedule=frozen,
                                  public=(data.public_x, data.public_y), **kwargs)
    dpsgd_run = ppsgd.private_sgd("square", data.private_x, data.private_y, **kwargs)
    assert torch.equal(ppsgd_run.weights, dpsgd_run.weights)
    assert ppsgd_run.noise_multipliers == dpsgd_run.noise_multipliers
    assert ppsgd_run.steps == dpsgd_run.steps == SETUP.planned_steps
    assert set(ppsgd_run.clip_norms) == {SETUP.initial_clip_norm}
    assert ppsgd_run.accountant.ledger == dpsgd_run.accountant.ledger
    with pytest.raises(ValueError, match="public"):
        ppsgd.private_sgd("square", data.private_x, data.private_y, schedule=frozen, **kwargs)


def test_quick_mode_writes_its_tables_figures_and_claims(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDPUB_CACHE_DIR", str(tmp_path / "cache"))
    out = ppsgd.main(["--quick", "--losses", "square", "--out", str(tmp_path / "out")])
    assert {"comparison.md", "figure.png", "schedule.png", "table.csv", "table.md", "tuning.md", "claims.json"} <= {
        p.name for p in out.iterdir()}
    with open(out / "table.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(ppsgd.ARM_LABELS) + len(ppsgd.REFERENCES) and all(r["seeds"] == "3" for r in rows)
    record = read_claims_json(out / "claims.json")
    assert record.quick and record.seed_paper == "004" and len(record.claims) == len(ppsgd.CLAIMS)
    assert all(c.verdict.startswith(VERDICTS) for c in record.claims)
    assert all((out / path).exists() for path in (*record.tables, *record.figures))
    assert "not counted in ε" in record.tuning and "validation" in (out / "tuning.md").read_text(encoding="utf-8")


def test_the_budget_test_reads_the_papers_noise_and_fires_where_the_runs_own_would_not(cache_dir):
    """ϕ = 10 against this run's noise: the budget never grows; against the paper's tCDP noise (k > 1) it does."""
    data = ppsgd.make_data("hinge", seed=0, **SMALL)
    kwargs = {"target_epsilon": 0.3, "setup": ppsgd.Setup(batch_size=40, planned_steps=30, initial_clip_norm=1.0),
              "seed": 1, "public": (data.public_x, data.public_y), "cache_dir": cache_dir}
    own = ppsgd.private_sgd("hinge", data.private_x, data.private_y,
                            schedule=PublicScheduleConfig(noise_reference="run"), **kwargs)
    paper = ppsgd.private_sgd("hinge", data.private_x, data.private_y, schedule=PublicScheduleConfig(), **kwargs)
    assert len(set(own.noise_multipliers)) == 1
    assert paper.noise_multipliers[-1] < paper.noise_multipliers[0] and paper.epsilon <= 0.3


@pytest.mark.parametrize("guess", [1, 200])
def test_affordable_steps_finds_the_last_count_within_the_budget(guess):
    accountant = UserLevelAccountant("pld", pld_discretization=1e-2)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(3.0)), 5)
    event = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(2.0))
    k = ppsgd.affordable_steps(accountant, event, 1.0, 1e-5, guess=guess)
    assert accountant.epsilon_if(event, 1e-5, count=k) <= 1.0 < accountant.epsilon_if(event, 1e-5, count=k + 1)
    assert ppsgd.affordable_steps(accountant, event, 1e-3, 1e-5, guess=guess) == 0


@pytest.mark.parametrize(("epsilon", "q", "steps"), [(1.0, 0.05, 100), (0.25, 0.01, 300)])
def test_weak_baselines_noise_is_advanced_composition_of_subsampled_gaussians(epsilon, q, steps, cache_dir):
    """Each step's Gaussian, amplified by sampling, composed by dp-accounting's advanced composition, spends the
    target ε at δ (and 2 % less noise would not): the paper's weak baseline, far noisier than PLD's z."""
    delta = 1e-5
    z = ppsgd.advanced_composition_noise(epsilon, delta, q, steps)

    def spent(noise: float) -> float:
        step_delta = delta / (2 * steps)
        base = privacy_loss_distribution.from_gaussian_mechanism(noise).get_epsilon_for_delta(step_delta / q)
        amplified = DifferentialPrivacyParameters(math.log1p(q * math.expm1(base)), step_delta)
        return pld_accountant.advanced_composition(amplified, steps, delta)

    assert spent(z) <= epsilon * 1.001 and spent(0.98 * z) > epsilon
    pld = calibrate_noise_multiplier(epsilon, delta, PoissonSampling(q), steps, "pld", cache_dir)
    assert z > 1.5 * pld


def _results(values: dict[str, list[float]], loss: str = "hinge") -> list[ppsgd.Result]:
    return [ppsgd.Result(loss, 1.0, seed, method, "", value)
            for method, per_seed in values.items() for seed, value in enumerate(per_seed)]


GOOD = {ppsgd.PPSGD: [0.80, 0.83, 0.81, 0.84], ppsgd.MERGED: [0.78, 0.80, 0.80, 0.81],
        ppsgd.NONPRIVATE: [0.93] * 4, ppsgd.TRIVIAL: [0.5] * 4}


@pytest.mark.parametrize(("change", "outcome", "why"), [
    ({}, "supports", ""),
    ({ppsgd.NONPRIVATE: [0.83] * 4}, "not testable",
     "non-private training 0.8300 vs the best private arm ppsgd 0.8200"),
    ({ppsgd.MERGED: [0.50, 0.52, 0.51, 0.53]}, "not testable", "dpsgd_merged at chance"),
])
def test_claims_are_paired_and_gated_on_validation_scores(change, outcome, why):
    """Every seed favours PPSGD by 0.01–0.03: paired, that supports the claim; the same validation scores with no
    headroom to non-private training, or DP-SGD at chance on them, are not testable, with the gate's numbers; the
    gates read the validation scores only (the same failures in the test outcomes change nothing)."""
    values = {**GOOD, **change}
    judged = ppsgd.judge(ppsgd.CLAIMS[0], ppsgd.Study(_results(GOOD), _results(values), ()))
    (cell,) = judged.differences
    assert judged.outcome == outcome and why in judged.verdict
    paired = [a - b for a, b in zip(GOOD[ppsgd.PPSGD], GOOD[ppsgd.MERGED])]
    assert cell.test == "paired t" and cell.diff == pytest.approx(sum(paired) / 4)
    assert ppsgd.judge(ppsgd.CLAIMS[0], ppsgd.Study(_results(values), _results(GOOD), ())).outcome != "not testable"


def test_a_learning_rate_tuned_to_its_low_edge_makes_the_claim_not_testable_at_both_points():
    """Issue 45, item 2: DP-SGD's η chosen at the smallest value of its grid means its private step was switched
    off: the claim at the own points and at DP-SGD's shared point (whose η it is) is not testable there."""
    grid = {"C": (0.3, 1.0), "η": (0.1, 0.3, 1.0)}
    low = Tuning({"C": 1.0, "η": 0.1}, 0.8, 6, (), grid)
    inside = Tuning({"C": 1.0, "η": 0.3}, 0.8, 6, (), grid)
    shared = {**GOOD, "ppsgd@dpsgd_merged": GOOD[ppsgd.PPSGD]}
    own_claim, shared_claim = (next(c for c in ppsgd.CLAIMS if (c.better, c.worse) == (better, ppsgd.MERGED))
                               for better in (ppsgd.PPSGD, "ppsgd@dpsgd_merged"))
    for tuning, outcome in ((low, "not testable"), (inside, "supports")):
        tunings = (ppsgd.Tuned("hinge", 1.0, ppsgd.MERGED, tuning), ppsgd.Tuned("hinge", 1.0, ppsgd.PPSGD, inside))
        study = ppsgd.Study(_results(shared), _results(shared), tunings)
        for claim in (own_claim, shared_claim):
            judged = ppsgd.judge(claim, study)
            assert judged.outcome == outcome
            assert ("dpsgd_merged's tuned private step is at its grid's low edge (η)" in judged.verdict) == (
                tuning is low)


def test_arms_tune_jointly_on_tuning_draws_run_at_shared_points_and_the_ablations_remove_one_stage_each(cache_dir):
    """Issue 45: the tuning scores the tuning draws' validation splits (never a test seed's), the private arms on one
    union grid (each the axes it has), public-only apart; PPSGD also runs at each control's point; on one-point grids
    the schedule-only arm is PPSGD's very run before its public fine-tuning, and DP-SGD + reuse keeps z and C
    constant before the same fine-tuning."""
    tests, draws = (0, 1, 2), (ppsgd.TUNING_SEED,)
    datas = {seed: ppsgd.make_data("square", seed, **SMALL) for seed in (*tests, *draws)}
    setup = ppsgd.Setup(batch_size=40, planned_steps=30, learning_rates=(1.0,), clip_norms=(0.3,),
                        reuse_weights=(0.1,), pld_discretization=1e-2)
    references = {ppsgd.NONPRIVATE: [0.0] * 3, ppsgd.CEILING: [0.0] * 3, ppsgd.TRIVIAL: [1.0] * 3}
    cell = ppsgd.run_cell("square", 1.0, datas, tests, draws, setup, references, cache_dir)
    assert {r.seed for r in cell.results} == set(tests) and {r.seed for r in cell.validation} == set(draws)
    tunings = {t.method: t.tuning for t in cell.tunings}
    assert set(tunings) == {*ppsgd.PRIVATE_AXES, ppsgd.PUBLIC, *(f"ppsgd@{w}" for w in ppsgd.SHARED if w !=
                                                                 ppsgd.REUSE_ONLY)}
    assert all(set(tunings[arm].grid) == set(axes) for arm, axes in ppsgd.PRIVATE_AXES.items())
    assert len({tunings[arm].grid["η"] for arm in ppsgd.PRIVATE_AXES}) == 1
    tuning_draw = datas[ppsgd.TUNING_SEED]
    assert tunings[ppsgd.PUBLIC].best_score == ppsgd.evaluate("square", ppsgd.regularized_erm(
        "square", tuning_draw.public_x, tuning_draw.public_y, 0.1), tuning_draw.validation_x, tuning_draw.validation_y)
    validation = {r.method: r.value for r in cell.validation}
    assert validation[ppsgd.PUBLIC] == tunings[ppsgd.PUBLIC].best_score
    assert validation[ppsgd.NONPRIVATE] == ppsgd.evaluate("square", ppsgd.nonprivate("square", tuning_draw, setup.l2),
                                                         tuning_draw.validation_x, tuning_draw.validation_y)
    by = {(r.method, r.seed): r for r in cell.results}
    for seed, run in zip(tests, cell.ppsgd_runs):
        data = datas[seed]
        with_reuse, schedule_only, reuse_only = (by[m, seed] for m in (ppsgd.PPSGD, ppsgd.NO_REUSE, ppsgd.REUSE_ONLY))
        assert (schedule_only.steps, schedule_only.epsilon_spent) == (with_reuse.steps, with_reuse.epsilon_spent)
        assert schedule_only.value == ppsgd.evaluate("square", run.weights, data.test_x, data.test_y)
        reused = ppsgd.regularized_erm("square", data.public_x, data.public_y, 0.1, run.weights)
        assert with_reuse.value == ppsgd.evaluate("square", reused, data.test_x, data.test_y) != schedule_only.value
        assert reuse_only.first_noise_multiplier == reuse_only.last_noise_multiplier
        assert reuse_only.last_clip_norm == 0.3 and reuse_only.budget_steps == reuse_only.clip_steps == 0
    for seed in tests:  # PPSGD at SgdAdv's point: C the a-priori clip, SgdAdv's η; at DP-SGD's: its C and η
        at_adv = by["ppsgd@sgd_adv", seed]
        assert at_adv.last_clip_norm <= setup.a_priori_clip and at_adv.value != by[ppsgd.PPSGD, seed].value
        assert by["ppsgd@dpsgd_merged", seed].value == by[ppsgd.PPSGD, seed].value  # one-point grids: one point
