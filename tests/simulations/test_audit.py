"""`fedpub audit`: canary clients give an empirical ε below the accountant's for the real mechanism and
above it for a mechanism with a tenth of the noise (tiny synthetic data, real engine and accountant)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss
from scipy.stats import norm
from typer.testing import CliRunner

from fedpub.cli import app
from fedpub.config import dump_config
from simulations.audit import VIOLATION, Canaries, gdp_epsilon, run_audit
from simulations.experiment import build_experiment
from tests.conftest import tiny_config

ROUNDS, CANARIES = 16, 400


def _config(data_dir, out_dir, z, rounds=ROUNDS):
    """q = 4/16 = 0.25, ``rounds`` rounds, evaluated and checkpointed once, noise multiplier ``z``."""
    return tiny_config(data_dir, out_dir, rounds=rounds, eval_every=rounds, checkpoint_every=rounds,
                       strategy={"noise_multiplier": z})


def test_gdp_epsilon_solves_dong_roth_su_and_matches_the_exact_gaussian_mechanism():
    delta = 1e-5
    eps = gdp_epsilon(1.0, delta)
    assert norm.cdf(-eps + 0.5) - math.exp(eps) * norm.cdf(-eps - 0.5) == pytest.approx(delta, rel=1e-6)
    for mu in (0.3, 1.0, 4.0):  # μ-GDP is the Gaussian mechanism with sensitivity 1 and σ = 1/μ
        gaussian = GaussianPrivacyLoss(standard_deviation=1 / mu)
        assert gaussian.get_delta_for_epsilon(gdp_epsilon(mu, delta)) == pytest.approx(delta, rel=1e-6)
    grid = [gdp_epsilon(mu, delta) for mu in np.linspace(0.1, 60, 60)]
    assert all(a < b for a, b in zip(grid, grid[1:]))
    assert gdp_epsilon(-0.5, delta) == gdp_epsilon(0.0, delta) == gdp_epsilon(1e-7, delta) == 0.0
    assert math.isfinite(gdp_epsilon(1000.0, delta)) and gdp_epsilon(math.inf, delta) == math.inf


def test_inserted_canaries_join_at_the_sampling_rate_and_held_out_ones_never():
    template = {"w": torch.zeros(3, 4), "b": torch.zeros(5)}
    canaries = Canaries(count=40, rate=0.25, norm=5.0, template=template, seed=1)
    joined = [canaries.joined(t) for t in range(2000)]
    assert all(0 <= i < 20 for ids in joined for i in ids)
    counts = np.bincount([i for ids in joined for i in ids], minlength=20) / 2000
    assert counts.mean() == pytest.approx(0.25, abs=3 * math.sqrt(0.25 * 0.75 / 40000))
    assert np.all(np.abs(counts - 0.25) < 5 * math.sqrt(0.25 * 0.75 / 2000))
    update = canaries.updates(next(t for t, ids in enumerate(joined) if ids))[0]
    assert {k: v.shape for k, v in update.items()} == {k: v.shape for k, v in template.items()}
    assert math.sqrt(sum(float(v.square().sum()) for v in update.values())) == pytest.approx(5.0, rel=1e-6)
    assert torch.equal(canaries.direction(7), Canaries(40, 0.5, 1.0, template, 1).direction(7))


def test_the_real_mechanism_is_consistent_and_canaries_join_the_clipped_noisy_cohort(tiny_emnist_dir, tmp_path):
    cfg = _config(tiny_emnist_dir, tmp_path, z=1.0)
    audit = run_audit(cfg, canaries=CANARIES, noise_scale=1.0, seed=0)
    assert audit.claimed_epsilon == pytest.approx(audit.run_epsilon)  # the run is the configured mechanism
    assert audit.empirical_epsilon < audit.claimed_epsilon and audit.interval[0] < audit.claimed_epsilon
    assert audit.verdict == "consistent" and audit.mu > 0.5  # the canaries are seen, within the bound
    assert audit.held_out_cosine_std * math.sqrt(audit.dimension) == pytest.approx(1.0, abs=0.15)  # N(0, 1/d)
    root = tmp_path / "tiny_audit_x1_k400_s0"
    assert audit.run_dir == root and (root / "cosines.png").stat().st_size > 0
    assert json.loads((root / "audit.json").read_text())["empirical_epsilon"] == audit.empirical_epsilon
    experiment = build_experiment(cfg)
    canaries = Canaries(CANARIES, 0.25, 5.0, {}, seed=0)
    records = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        cohort = experiment.strategy.sample_cohort(experiment.private_ids, r["round"])
        assert r["cohort_sampled"] == len(cohort) + len(canaries.joined(r["round"]))


def test_a_tenth_of_the_noise_is_flagged_as_a_violation(tiny_emnist_dir, tmp_path):
    # z = 2 keeps the broken run's own PLD ledger (z = 0.2) cheap to compute
    audit = run_audit(_config(tiny_emnist_dir, tmp_path, z=2.0), canaries=CANARIES, noise_scale=0.1, seed=0)
    assert audit.noise_multiplier_used == pytest.approx(0.2) and audit.noise_multiplier_claimed == 2.0
    assert audit.interval[0] > audit.claimed_epsilon and audit.verdict == VIOLATION
    assert audit.empirical_epsilon < audit.run_epsilon  # still below the ε of the mechanism that ran


def test_runs_the_audit_can_not_judge_and_bad_options_are_refused_before_anything_is_written(tiny_emnist_dir, tmp_path):
    cfg = _config(tiny_emnist_dir, tmp_path, z=1.0)
    with pytest.raises(ValueError, match="at least 4"):
        run_audit(cfg, canaries=3)
    with pytest.raises(ValueError, match="> 0"):
        run_audit(cfg, noise_scale=0.0)
    adaptive = tiny_config(tiny_emnist_dir, tmp_path, strategy={
        "adaptive_clip": {"target_quantile": 0.5, "learning_rate": 0.2, "count_noise_std": 2.0}})
    with pytest.raises(ValueError, match="strategy.adaptive_clip"):
        run_audit(adaptive)
    assert list(tmp_path.iterdir()) == []


def test_the_audit_command_prints_one_row_per_noise_scale(tiny_emnist_dir, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(dump_config(_config(tiny_emnist_dir, tmp_path / "runs", z=1.0, rounds=3)))
    runner = CliRunner()
    result = runner.invoke(app, ["audit", str(config), "--canaries", "20", "--noise-scale", "1", "--noise-scale", "2"])
    assert result.exit_code == 0, result.output
    assert "claimed ε" in result.output and "empirical ε" in result.output
    for scale in (1, 2):  # a row: noise scale, z used (= scale, as z = 1), claimed ε, ...
        audit = json.loads((tmp_path / f"runs/tiny_audit_x{scale}_k20_s0/audit.json").read_text())
        assert re.search(rf"│\s+{scale}\s+│\s+{scale}\s+│\s+{audit['claimed_epsilon']:.4g}\s+│", result.output)
    bad = runner.invoke(app, ["audit", str(config), "--canaries", "3"])
    assert bad.exit_code == 2 and "at least 4" in bad.output
    bad = runner.invoke(app, ["audit", str(config), "--noise-scale", "-1"])
    assert bad.exit_code == 2 and "> 0" in bad.output
