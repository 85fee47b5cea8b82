"""What an audit's size detects (simulations/tools/audit_power.py), on canary statistics made by hand, and the audit
command's exit status on a violation (a short run)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpub.config import dump_config
from fedpub.privacy.empirical import gdp_epsilon
from fedpub.simulations.tools.audit_power import (
    all_iterates_statistic,
    canaries_to_detect,
    detects,
    final_statistic,
    smallest_error,
)
from fedpub.simulations.tools.cli import app
from tests.conftest import tiny_config

DELTA = 1e-5


def _final(n: int = 2000, shift: float = 0.5):
    rng = np.random.default_rng(0)
    held_out, noise = rng.standard_normal(n), rng.standard_normal(n)
    inserted = noise - noise.mean() + held_out.mean() + shift * held_out.std(ddof=1)  # μ = shift exactly
    return final_statistic(inserted, held_out, np.ones(n))


def test_the_scaled_statistics_shift_the_inserted_canaries_only():
    rng = np.random.default_rng(1)
    held_out, inserted = rng.standard_normal(50), rng.standard_normal(50) + 1.0
    joins = rng.integers(0, 5, 50)
    scaled = final_statistic(inserted, held_out, joins)
    per_join = (inserted.mean() - held_out.mean()) / joins.mean()
    tripled, same = scaled(3.0)
    assert same is held_out and tripled == pytest.approx(inserted + 2 * per_join * joins)
    assert tripled.mean() - held_out.mean() == pytest.approx(3 * (inserted.mean() - held_out.mean()))
    rounds = np.array([[0.1, 0.0, 0.2, 0.0], [0.3, 0.5, -0.2, 0.0]])  # 2 rounds, 2 inserted then 2 held out
    joined = np.array([[True, False], [False, True]])
    shift = (0.1 + 0.5) / 2 - 0.0  # joined canaries' mean cosine over the held-out ones'
    doubled, maxima = all_iterates_statistic(rounds, joined)(2.0)
    assert doubled == pytest.approx([max(0.1 + shift, 0.3), max(0.0, 0.5 + shift)])
    assert maxima == pytest.approx([0.2, 0.0])


def test_the_smallest_error_detected_is_where_the_estimate_clears_the_claim_by_its_power_margin():
    statistic, claimed = _final(), gdp_epsilon(1.0, DELTA)  # μ 0.5 seen, μ 1 claimed, 2000 + 2000 canaries
    f = smallest_error(statistic, 1.0, claimed, DELTA, "final", seed=0)
    assert detects(statistic, f, 1, claimed, DELTA, "final", 0)
    assert not detects(statistic, f / 1.01, 1, claimed, DELTA, "final", 0)
    # normal theory: μ̂'s standard error √(1/n_in + 1/n_out + μ²/(2 n_out)); flagged in 95 % of audits when
    # μ − (1.96 + 1.645)·se clears the claimed μ
    mu = 0.5 * f
    assert mu - 3.605 * math.sqrt(2 / 2000 + mu**2 / 4000) == pytest.approx(1.0, abs=0.03)
    # the same canaries seen in a run with half the noise: the claimed noise would show them half as far apart
    assert smallest_error(statistic, 0.5, claimed, DELTA, "final", 0) == pytest.approx(2 * f, rel=0.02)
    assert math.isinf(smallest_error(_final(shift=-0.05), 1.0, claimed, DELTA, "final", 0))  # no canary seen


def test_the_canaries_that_detect_an_error_are_the_fewest_multiple_of_those_run():
    statistic, claimed = _final(n=200, shift=0.6), gdp_epsilon(1.0, DELTA)  # 400 canaries, z/2: μ 1.2
    f = smallest_error(statistic, 1.0, claimed, DELTA, "final", seed=0)
    assert f > 2.0  # 400 canaries do not detect z/2 ...
    needed = canaries_to_detect(statistic, 2.0, 1.0, 400, claimed, DELTA, "final", seed=0)
    assert needed is not None and needed % 400 == 0 and needed > 400  # ... a multiple of them does
    assert detects(statistic, 2.0, needed // 400, claimed, DELTA, "final", 0)
    assert not detects(statistic, 2.0, needed // 400 - 1, claimed, DELTA, "final", 0)
    assert canaries_to_detect(statistic, f, 1.0, 400, claimed, DELTA, "final", seed=0) == 400
    assert canaries_to_detect(_final(n=200, shift=-0.05), 2.0, 1.0, 400, claimed, DELTA, "final", seed=0) is None


def test_the_audit_command_exits_1_on_a_violation(tiny_emnist_dir, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(dump_config(tiny_config(tiny_emnist_dir, tmp_path / "runs", rounds=4, eval_every=4,
                                              checkpoint_every=4, strategy={"noise_multiplier": 3.0})))
    result = CliRunner().invoke(app, ["audit", str(config), "--canaries", "200", "--noise-scale", "0.2"])
    audit = json.loads((tmp_path / "runs/tiny_audit_x0.2_k200_s0/audit.json").read_text())
    assert audit["verdict"].startswith("VIOLATION") and "VIOLATION" in result.output
    assert result.exit_code == 1, result.output
    assert "this size detects a run adding noise z/" in result.output
