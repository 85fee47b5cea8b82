"""The PDA-DPMD linear-regression reproduction (seed 000, §3, Figure 1, App. E): the data recipe, the mirror
map, the DP-SGD reduction, the noise scale, the verdict rules and the files of a tiny run."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from fedpub.seeding import torch_generator
from fedpub.simulations.reproductions import pda_dpmd_linear_regression as pda
from fedpub.simulations.reproductions.results_record import VERDICTS, read_claims_json
from fedpub.simulations.reproductions.tuning import Axis, Tuning, at_point, tune


K = pda.HEAD_ACTIVE + pda.TAIL_ACTIVE


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Single-threaded, as the command runs: small tensors are slower with two contending OpenMP threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def dense(idx: torch.Tensor, dim: int) -> torch.Tensor:
    """The feature matrix X (rows, p) of active indices."""
    x = torch.zeros(idx.shape[0], dim, dtype=pda.DTYPE)
    return x.scatter_(1, idx, pda.FEATURE_VALUE)


def test_problem_follows_the_papers_recipe_and_is_deterministic():
    problem = pda.generate_problem(500, seed=0, n_private=2000)
    assert problem.theta_star.shape == (500,)
    assert problem.private_idx.shape == (2000, K) and problem.private_y.shape == (2000,)
    assert problem.public_idx.shape == (750, K) and problem.public_y.shape == (750,)  # 1.5·p public samples
    for idx in (problem.private_idx, problem.public_idx):
        head, tail = idx[:, : pda.HEAD_ACTIVE], idx[:, pda.HEAD_ACTIVE :]
        assert head.min() >= 0 and head.max() < 100 and tail.min() >= 100 and tail.max() < 500  # p/5 and 4p/5
        x = dense(idx, 500)
        assert torch.equal((x > 0).sum(1), torch.full((idx.shape[0],), K))  # distinct: 40 + 80 non-zeros
        assert set(x.unique().tolist()) == {0.0, 0.05}
    assert abs(float(problem.theta_star.std()) - 1) < 0.1
    residual = problem.private_y - dense(problem.private_idx, 500) @ problem.theta_star
    assert abs(float(residual.std()) - 0.1) < 0.005  # y ~ N(θ*·x, 0.01)
    again, other = pda.generate_problem(500, seed=0, n_private=2000), pda.generate_problem(500, seed=1, n_private=2000)
    assert problem.head_scale == again.head_scale == 1.0  # the paper's features
    assert all(torch.equal(getattr(problem, k), getattr(again, k)) for k in vars(problem) if k != "head_scale")
    assert not torch.equal(problem.private_idx, other.private_idx)
    with pytest.raises(ValueError, match="multiple of 5"):
        pda.generate_problem(502, seed=0, n_private=10)


def test_feature_second_moment_has_the_block_pattern_and_the_population_loss_is_exact():
    dim, rows = 250, 40_000
    x = dense(pda.sample_features(rows, dim, torch_generator("test", 0)), dim)
    moment = x.T @ x / rows
    head, tail = slice(0, 50), slice(50, 250)

    def pairs(block: slice, size: int) -> torch.Tensor:
        return (moment[block, block].sum() - moment[block, block].trace()) / (size * (size - 1))

    expected = {  # 0.05²·(k/m on the diagonal, k(k−1)/(m(m−1)) within a block, π_head·π_tail across)
        "head diagonal": (moment[head, head].diagonal().mean(), 0.0025 * 40 / 50),
        "tail diagonal": (moment[tail, tail].diagonal().mean(), 0.0025 * 80 / 200),
        "head pairs": (pairs(head, 50), 0.0025 * 40 * 39 / (50 * 49)),
        "tail pairs": (pairs(tail, 200), 0.0025 * 80 * 79 / (200 * 199)),
        "across": (moment[head, tail].mean(), 0.0025 * (40 / 50) * (80 / 200)),
    }
    for name, (got, want) in expected.items():
        assert float(got) == pytest.approx(want, rel=0.01), name
    # the exact population loss against a Monte Carlo estimate on the same fresh features
    theta_star = torch.randn(dim, generator=torch_generator("test", 1), dtype=pda.DTYPE)
    theta = theta_star + 0.5 * torch.randn(dim, generator=torch_generator("test", 2), dtype=pda.DTYPE)
    monte_carlo = ((x @ (theta - theta_star)) ** 2).mean() + pda.LABEL_NOISE_VARIANCE
    assert float(pda.population_loss(theta[None], theta_star)[0]) == pytest.approx(float(monte_carlo), rel=0.02)
    assert float(pda.population_loss(theta_star[None], theta_star)[0]) == pytest.approx(0.01)
    # every feature vector has head sum 2 and tail sum 4: XᵀX has this exact null direction
    null = torch.cat([torch.full((50,), 1 / 2), torch.full((200,), -1 / 4)]).to(pda.DTYPE)
    assert float((x @ null).abs().max()) < 1e-12


def test_public_hessian_mirror_map_and_public_solution():
    draw = pda.prepare(250, seed=0, n_private=300)
    problem = draw.problem
    x_pub = dense(problem.public_idx, 250)
    hessian = 2 * x_pub.T @ x_pub / x_pub.shape[0]
    torch.testing.assert_close(pda.public_hessian(problem.public_idx, 250), hessian, rtol=1e-12, atol=1e-15)
    ridge = pda.RIDGE * hessian.diagonal().mean()
    eigenvalues = torch.linalg.eigvalsh(hessian + ridge * torch.eye(250, dtype=pda.DTYPE))
    assert draw.spectrum.smallest == pytest.approx(float(eigenvalues[0]), rel=1e-6)
    assert draw.spectrum.smallest == pytest.approx(float(ridge), rel=1e-6)  # the null direction
    assert draw.spectrum.second_smallest == pytest.approx(float(eigenvalues[1]), rel=1e-6)
    assert draw.spectrum.largest == pytest.approx(float(eigenvalues[-1]), rel=1e-8)
    # P = λ_min·H⁻¹ has largest eigenvalue one (App. E's normalisation)
    assert float(torch.linalg.eigvalsh(draw.mirror.matrix)[-1]) == pytest.approx(1.0, rel=1e-6)
    # θ_pub solves the (ridged) public normal equations
    normal = (hessian + ridge * torch.eye(250, dtype=pda.DTYPE)) @ draw.theta_pub - 2 * x_pub.T @ problem.public_y / 375
    assert float(normal.abs().max()) < 1e-9
    # the identity Hessian gives the identity mirror map
    identity, spectrum = pda.mirror_map(torch.eye(30, dtype=pda.DTYPE))
    assert spectrum.smallest == pytest.approx(1.0) and spectrum.largest == pytest.approx(1.0)
    torch.testing.assert_close(identity.matrix, torch.eye(30, dtype=pda.DTYPE))


def test_pda_dpmd_with_identity_hessian_is_exactly_dp_sgd():
    problem = pda.generate_problem(250, seed=1, n_private=300)
    lrs = torch.tensor([5.0, 50.0], dtype=pda.DTYPE)
    clip_norms = torch.tensor([0.05, 0.5], dtype=pda.DTYPE)
    runs = [pda.train(problem, torch.zeros(250, dtype=pda.DTYPE), lrs, clip_norms, 0.2, 6, 1.3,
                      torch_generator("test", "same seed"), mirror)
            for mirror in (None, pda.MirrorMap(torch.eye(250, dtype=pda.DTYPE)))]
    assert torch.equal(runs[0].last, runs[1].last) and torch.equal(runs[0].average, runs[1].average)
    assert not torch.equal(runs[0].last[0], runs[0].last[1])


def test_identity_control_is_warm_dp_sgd_and_the_misspecified_map_keeps_the_spectrum():
    draw = pda.prepare(250, seed=4, n_private=300)
    schedule = pda.Schedule(0.2, 1.0)
    lrs, clips = torch.tensor([8.0, 40.0], dtype=pda.DTYPE), torch.tensor([0.01, 0.1], dtype=pda.DTYPE)
    assert pda._unit(draw, "pda_identity") == pda._unit(draw, "warm_dp_sgd")
    warm, identity = (pda.run_algorithm(draw, 4, arm, schedule, 1.1, lrs, clips) for arm in ("warm_dp_sgd",
                                                                                            "pda_identity"))
    assert torch.equal(warm.last, identity.last) and torch.equal(warm.average, identity.average)
    right, wrong = draw.mirror.matrix, draw.misspecified.matrix
    assert not torch.equal(right, wrong)
    torch.testing.assert_close(wrong, wrong.T)
    torch.testing.assert_close(torch.linalg.eigvalsh(wrong), torch.linalg.eigvalsh(right))
    assert pda._unit(draw, "pda_misspecified") == pda._unit(draw, "pda_dpmd")
    misspecified = pda.run_algorithm(draw, 4, "pda_misspecified", schedule, 1.1, lrs, clips)
    assert not torch.equal(misspecified.last, pda.run_algorithm(draw, 4, "pda_dpmd", schedule, 1.1, lrs, clips).last)


def test_clipping_bounds_each_example_and_the_noise_std_is_z_c_over_the_expected_batch():
    problem = pda.generate_problem(250, seed=2, n_private=40)
    theta = torch.randn(2, 250, generator=torch_generator("test", 3), dtype=pda.DTYPE)
    clip_norms = torch.tensor([0.1, 100.0], dtype=pda.DTYPE)
    x = dense(problem.private_idx, 250)
    for i in range(3):
        one = slice(i, i + 1)
        gradient = pda.clipped_gradient_sum(theta, problem.private_idx[one], problem.private_y[one], clip_norms)
        raw = 2 * (theta @ x[i] - problem.private_y[i])[:, None] * x[i]
        assert float(gradient[0].norm()) == pytest.approx(min(0.1, float(raw[0].norm())))
        torch.testing.assert_close(gradient[1], raw[1])  # C = 100 never clips here
    # one DP-SGD step from θ* on noiseless labels: the gradients are 0, the step is −lr·N(0, (zC/qn)²)
    dim, z, q, lr = 20_000, 1.7, 0.25, 3.0
    theta_star = torch.randn(dim, generator=torch_generator("test", 4), dtype=pda.DTYPE)
    idx = pda.sample_features(200, dim, torch_generator("test", 5))
    y = pda.predict(theta_star[None], idx)[0]
    problem = pda.Problem(theta_star, idx, y, idx[:1], y[:1])
    clip_norms = torch.tensor([0.2, 2.0], dtype=pda.DTYPE)
    step = pda.train(problem, theta_star, torch.full((2,), lr, dtype=pda.DTYPE), clip_norms, q, 1, z,
                     torch_generator("test", 6)).last - theta_star
    for row, clip in zip(step, clip_norms.tolist()):
        assert float(row.std()) == pytest.approx(lr * z * clip / (q * 200), rel=0.02)
        assert abs(float(row.mean())) < 4 * lr * z * clip / (q * 200) / math.sqrt(dim)


def _results(losses: dict[str, list[float]], dims: list[int], condition: list[float]) -> list[pda.Result]:
    """Each arm's losses per p, and each shared-point run equal to its arm at its own point."""
    runs = {**losses, **{at_point(arm, owner): losses[arm] for arm, owner in pda.SHARED_POINTS.values()}}
    return [pda.Result(a, d, seed, v + 1e-4 * seed, v, c)
            for a, values in runs.items() for d, v, c in zip(dims, values, condition) for seed in range(3)]


def test_verdicts_come_from_the_numbers():
    dims = [500, 1000, 2000]
    paper_like = _results({"cold_dp_sgd": [0.05, 0.1, 0.2], "warm_dp_sgd": [0.020, 0.021, 0.022],
                           "pda_dpmd": [0.015, 0.018, 0.021]}, dims, [900.0, 500.0, 300.0])
    lines = pda.comparison_lines(paper_like)
    judged, described = lines[:-1], lines[-1]
    assert len(judged) == len(pda.CLAIM_TEXTS) + len(pda.SHARED_POINTS)
    assert all("**supports**" in line for line in judged), lines
    assert "not judged: a property of the data" in described.replace("Described, not judged", "not judged")
    opposite = _results({"cold_dp_sgd": [0.2, 0.1, 0.05], "warm_dp_sgd": [0.3, 0.4, 0.9],
                         "pda_dpmd": [0.4, 0.5, 1.0]}, dims, [300.0, 500.0, 900.0])
    assert not any("**supports**" in line for line in pda.comparison_lines(opposite)[:-1])


def test_quick_mode_uses_fedpubs_mirror_step_and_writes_claims_json(tmp_path):
    out = pda.main(["--quick", "--out", str(tmp_path / "out")])
    record = read_claims_json(out / "claims.json")
    assert record.quick and record.seeds == 3 and record.seed_paper == "000"
    assert len(record.claims) == len(pda.CLAIM_TEXTS) + len(pda.SHARED_POINTS)
    assert all(c.verdict.startswith(VERDICTS) for c in record.claims)
    assert all((out / path).exists() for path in (*record.tables, *record.figures))
    with open(out / "table.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    shared = [at_point(arm, owner) for arm, owner in pda.POINTS]
    assert [(r["algorithm"], r["dim"]) for r in rows] == [(a, d) for d in ("250", "500", "750")
                                                          for a in (*pda.ARMS, *shared)]
    paired = json.loads((out / "paired.json").read_text())
    assert set(paired["values"]) == {*pda.ARMS, *shared} and paired["seeds"] == [0, 1, 2]
    # P = I trains exactly as warm DP-SGD at every grid point, so its tuning and its losses are warm DP-SGD's
    assert paired["values"]["pda_identity"] == paired["values"]["warm_dp_sgd"]
    assert {c["role"] for c in paired["claims"]} == {"claim", "control"}
    assert "2 draws disjoint from the test seeds" in record.tuning
    assert "not counted in ε" in (out / "tuning.md").read_text()
    # at a shared point of the same lr unit, the arm runs at the owner's whole point
    table = {(r["algorithm"], r["dim"]): r for r in rows}
    for key in ("epochs", "clip_norm", "lr", "output"):
        assert table["warm_dp_sgd@cold_dp_sgd", "500"][key] == table["cold_dp_sgd", "500"][key]
        assert table["pda_misspecified@pda_dpmd", "500"][key] == table["pda_dpmd", "500"][key]
    # across units, the owner's epochs and C with the arm's own lr factor re-tuned there
    for key in ("epochs", "clip_norm"):
        assert table["pda_dpmd@warm_dp_sgd", "500"][key] == table["warm_dp_sgd", "500"][key]


def _tuning_at(chosen: float) -> Tuning:
    """A real tuning over a three-value lr factor axis whose best is ``chosen``."""
    return tune([Axis("lr factor", (0.5, 1.0, 2.0))], lambda v: -abs(v["lr factor"] - chosen), higher_is_better=True,
                max_extensions=0)


def test_a_run_whose_private_step_was_tuned_to_the_low_edge_is_not_testable_and_its_shared_point_still_is():
    dims = [500, 1000]
    paper_like = _results({"cold_dp_sgd": [0.05, 0.1], "warm_dp_sgd": [0.020, 0.021],
                           "pda_dpmd": [0.015, 0.018]}, dims, [900.0, 500.0])
    inside = {(run, f"p={d}"): _tuning_at(1.0) for run in ("cold_dp_sgd", "warm_dp_sgd") for d in dims}
    switched_off = {**inside, **{("pda_dpmd", f"p={d}"): _tuning_at(0.5) for d in dims},
                    **{("pda_dpmd@warm_dp_sgd", f"p={d}"): _tuning_at(1.0) for d in dims}}
    judged = pda.claim_judgements(paper_like, switched_off)
    assert judged["pda_beats_warm"].outcome == "not testable"
    assert "pda_dpmd's tuned private step is at its grid's low edge (lr factor)" in judged["pda_beats_warm"].verdict
    assert judged[pda.shared_key("pda_beats_warm")].outcome == "supports"
    assert judged["warm"].outcome == "supports"
    # a shared run with no tuning of its own (PDA-DPMD at cold DP-SGD's point, here) reads its owner's
    assert judged[pda.shared_key("pda_flat")].outcome == "supports"
