"""Seed 000's conditioning claim at a fixed dimension (issue 45, item 5): the head features' scale sets the public
Hessian's conditioning, the population loss stays exact, tuning on several draws, the verdicts and the files of a
quick run."""

from __future__ import annotations

import json

import pytest
import torch

from fedpub.seeding import torch_generator
from fedpub.simulations.reproductions import pda_dpmd_conditioning as conditioning
from fedpub.simulations.reproductions import pda_dpmd_linear_regression as regression
from fedpub.simulations.reproductions.results_record import VERDICTS, read_claims_json
from fedpub.simulations.reproductions.tuning import at_point


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # single-threaded, as the command runs


def test_a_larger_head_scale_stretches_the_head_of_the_hessian_and_worsens_its_conditioning():
    problems = {scale: regression.generate_problem(250, 0, 300, head_scale=scale) for scale in (1.0, 4.0)}
    plain, scaled = problems[1.0], problems[4.0]
    for name in ("theta_star", "private_idx", "public_idx"):  # one draw: only the head features' value moves
        assert torch.equal(getattr(plain, name), getattr(scaled, name))
    x = torch.zeros(len(scaled.public_idx), 250, dtype=regression.DTYPE).scatter_(
        1, scaled.public_idx, regression.feature_values(4.0).expand(len(scaled.public_idx), -1))
    assert set(x[:, :50].unique().tolist()) == {0.0, 0.2} and set(x[:, 50:].unique().tolist()) == {0.0, 0.05}
    torch.testing.assert_close(regression.public_hessian(scaled.public_idx, 250, 4.0), 2 * x.T @ x / len(x))
    torch.testing.assert_close(regression.predict(scaled.theta_star[None], scaled.public_idx, 4.0)[0],
                               x @ scaled.theta_star)
    theta = torch.randn(3, 250, generator=torch_generator("test", 3), dtype=regression.DTYPE)
    gradient = regression.clipped_gradient_sum(theta, scaled.private_idx[:1], scaled.private_y[:1],
                                               torch.full((3,), 1e9, dtype=regression.DTYPE), 4.0)
    dense = torch.zeros(250, dtype=regression.DTYPE).scatter_(0, scaled.private_idx[0], regression.feature_values(4.0))
    expected = 2 * (theta @ dense - scaled.private_y[0])[:, None] * dense
    torch.testing.assert_close(gradient, expected)  # C = 1e9 never clips
    clipped = regression.clipped_gradient_sum(theta, scaled.private_idx[:1], scaled.private_y[:1],
                                              torch.full((3,), 1e-3, dtype=regression.DTYPE), 4.0)
    torch.testing.assert_close(clipped.norm(dim=1), torch.full((3,), 1e-3, dtype=regression.DTYPE))
    conditions = [(d.spectrum.largest / d.spectrum.second_smallest)
                  for d in (regression.prepare(250, 0, 10, head_scale=scale) for scale in (1.0, 2.0, 4.0))]
    assert conditions == sorted(conditions) and conditions[-1] > 4 * conditions[0], conditions


def test_the_population_loss_stays_exact_at_another_head_scale():
    dim, scale, rows = 250, 3.0, 40_000
    idx = regression.sample_features(rows, dim, torch_generator("test", 1))
    values = regression.feature_values(scale).expand(rows, -1)
    x = torch.zeros(rows, dim, dtype=regression.DTYPE).scatter_(1, idx, values)
    gen = torch_generator("test", 2)
    theta_star, theta = (torch.randn(dim, generator=gen, dtype=regression.DTYPE) for _ in range(2))
    monte_carlo = regression.LABEL_NOISE_VARIANCE + ((x @ (theta - theta_star)) ** 2).mean()
    exact = regression.population_loss(theta[None], theta_star, scale)[0]
    assert float(exact) == pytest.approx(float(monte_carlo), rel=0.02)
    assert float(exact) != pytest.approx(float(regression.population_loss(theta[None], theta_star)[0]), rel=0.02)


def test_tuning_on_the_same_draw_twice_chooses_what_one_draw_chooses():
    draw = regression.prepare(250, "tune", 300)
    arms = ("warm_dp_sgd", "pda_dpmd")
    once, _ = regression.tune_draw(draw, regression.QUICK_GRID, "rdp", arms)
    twice, _ = regression.tune_draw(draw, regression.QUICK_GRID, "rdp", arms, more=[(draw, "tune")])
    assert once == twice


def _level(scale: float, condition: float, gains: list[float]) -> conditioning.Level:
    warm = {s: 0.05 + g for s, g in enumerate(gains)}
    pda = {s: 0.05 for s in range(len(gains))}
    wrong = {s: 0.06 + 0.001 * s for s in range(len(gains))}
    losses = {"warm_dp_sgd": warm, "pda_dpmd": pda, "pda_misspecified": wrong}
    return conditioning.Level(scale, {}, {}, {**losses, **{at_point(arm, owner): losses[arm] for arm, owner
                                                           in conditioning.SHARED_POINTS.values()}}, (condition,))


def test_the_gain_must_grow_with_the_condition_number_in_every_step():
    growing = [_level(2, 50.0, [0.001, 0.002, 0.0015, 0.0012]), _level(5, 200.0, [0.010, 0.012, 0.011, 0.013]),
               _level(10, 800.0, [0.030, 0.033, 0.031, 0.029])]
    judged = conditioning.claim_judgements(growing)
    assert set(judged) == {*conditioning.CLAIM_TEXTS, *map(regression.shared_key, conditioning.SHARED_POINTS)}
    assert all(verdict.verdict.startswith("supports") for verdict in judged.values())
    flat_at_the_top = [*growing[:2], _level(10, 800.0, [0.011, 0.012, 0.010, 0.013])]
    assert conditioning.claim_judgements(flat_at_the_top)["gain_grows"].verdict.startswith("supports") is False


def test_quick_mode_writes_its_claims_and_paired_values(tmp_path):
    out = conditioning.main(["--quick", "--out", str(tmp_path / "out")])
    record = read_claims_json(out / "claims.json")
    assert record.quick and record.seeds == 3 and record.seed_paper == "000" and record.name == conditioning.NAME
    assert len(record.claims) == len(conditioning.CLAIM_TEXTS) + len(conditioning.SHARED_POINTS)
    assert all(c.verdict.startswith(VERDICTS) for c in record.claims)
    assert all((out / path).exists() for path in (*record.tables, *record.figures))
    paired = json.loads((out / "paired.json").read_text())
    assert set(paired["values"]) == set(conditioning.RUNS) and paired["seeds"] == [0, 1, 2]
    assert len(paired["values"]["pda_dpmd"]) == 2  # s = 1 and 4
    assert "2 draws disjoint from the test seeds" in record.tuning


def test_another_epsilon_calibrates_every_tuned_and_shared_point_to_it():
    draws = [(regression.prepare(250, "tune", 300), "tune")]
    arms = ("warm_dp_sgd", "pda_dpmd")
    for epsilon in (0.5, 1.0):
        choices, _ = regression.tune_on(draws, regression.QUICK_GRID, "rdp", arms, epsilon)
        shared, _ = regression.shared_points([("pda_dpmd", "warm_dp_sgd")], draws, regression.QUICK_GRID, "rdp",
                                             choices, epsilon)  # across units: PDA-DPMD re-tuned at warm's point
        for choice in (*choices.values(), *shared.values()):
            assert choice.noise_multiplier == regression.noise_multiplier(choice.schedule, "rdp", epsilon)
    schedule = choices["warm_dp_sgd"].schedule
    assert regression.noise_multiplier(schedule, "rdp", 0.5) > 1.5 * regression.noise_multiplier(schedule, "rdp", 1.0)


def test_a_second_epsilon_is_its_own_record_and_a_bad_one_is_refused(tmp_path, capsys):
    out = conditioning.main(["--quick", "--epsilon", "0.5", "--out", str(tmp_path / "out")])
    record = read_claims_json(out / "claims.json")
    assert record.name == "pda_dpmd_conditioning_eps0.5" and record.command.endswith("--quick --epsilon 0.5")
    assert "ε = 0.5, δ = 1e-05" in (out / "comparison.md").read_text()
    assert json.loads((out / "paired.json").read_text())["name"] == record.name
    for bad in ("0", "nan", "-1"):
        with pytest.raises(SystemExit):
            conditioning.main(["--quick", "--epsilon", bad, "--out", str(tmp_path / "bad")])
        assert "--epsilon must be a finite number > 0" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
