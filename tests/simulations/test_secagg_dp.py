"""Client-side clipping + Flower's SecAgg+ + server noise (``simulations/secagg_dp.py``), in real Flower
simulation with real dp-accounting: 4 users, a fixed cohort of 2 per round."""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

from fedpub.clients.client_app import runtime
from fedpub import tree
from fedpub.cohort_updates import Cohort
from fedpub.config import parse_config
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, write_synthetic_emnist
from fedpub.models.seeded import model_params
from fedpub.steps.gaussian_noise import gaussian_noise
from fedpub.types import RoundContext
from fedpub.simulations.engine import run_in_process
from fedpub.simulations.experiment import build_experiment
from fedpub.simulations.run_dir import RunDirectory
from fedpub.simulations.secagg_dp import (
    DIAGNOSTICS_FILE,
    RESULT_FILE,
    SecAggRound,
    check_supported,
    client_contribution,
    quantisation_for,
    run_secagg_simulation,
)
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow  # Flower, Ray or long end-to-end runs: pytest -m 'not slow' skips them

USERS = {"num_writers": 4, "min_examples": 6, "max_examples": 12, "seed": 1}
CLIP = 0.2  # below the users' update norms (about 0.35 in round 0): the clients really clip
COHORT = 2
Z = 1.0
FLOWER = {"client_num_cpus": 1, "ray_num_cpus": 2, "node_wait_timeout": 120}


@pytest.fixture(scope="module")
def four_users(tmp_path_factory):
    directory = tmp_path_factory.mktemp("four_users")
    write_synthetic_emnist(directory, SyntheticEmnistSpec(**USERS))
    return directory


def _config(data_dir, out_dir, noise_multiplier, rounds):
    return tiny_config(
        data_dir, out_dir, rounds=rounds,
        data={"synthetic": USERS},
        strategy={"clip_norm": CLIP, "noise_multiplier": noise_multiplier,
                  "sampling": {"kind": "fixed", "clients_per_round": COHORT}},
        privacy={"delta": 1e-5, "accountant": "rdp"},
        flower=FLOWER,
    )


def _run(config):
    rounds: list[SecAggRound] = []
    result = run_secagg_simulation(config, on_round=rounds.append)
    return result, rounds


@pytest.fixture(scope="module")
def noise_off(four_users, tmp_path_factory):
    config = _config(four_users, tmp_path_factory.mktemp("noise_off"), 0.0, rounds=2)
    return config, *_run(config)


def test_secure_sum_is_the_sum_of_the_client_clipped_updates(noise_off, one_torch_thread):
    config, result, rounds = noise_off
    assert [r.round for r in rounds] == [0, 1]
    rt = runtime(config)
    params = model_params(build_experiment(config).new_model())  # the global model before round 0
    quantisation = quantisation_for(CLIP, COHORT)
    errors = []
    for outcome in rounds:
        assert len(outcome.cohort) == COHORT and outcome.survivors == COHORT
        contributions = [client_contribution(rt, cid, params, outcome.round) for cid in outcome.cohort]
        norms = Cohort(contributions, params).norms()
        assert (norms <= CLIP * (1 + 1e-6)).all(), norms
        assert (norms > CLIP * 0.999).any()  # C binds on the device
        plain_sum = {k: torch.stack([c[k].double() for c in contributions]).sum(dim=0) for k in params}
        difference = torch.cat([(outcome.secure_sum[k] - plain_sum[k]).flatten() for k in plain_sum])
        error = float(difference.abs().max())
        errors.append((error, float(difference.pow(2).mean().sqrt())))
        assert error <= quantisation.max_sum_error(COHORT)  # under 1 level per user
        # z = 0, server SGD lr 1: the new model is the old one plus Σ/m
        for k in params:
            expected = params[k] + (plain_sum[k] / COHORT).float()
            torch.testing.assert_close(outcome.params[k], expected, rtol=0, atol=1e-6)
        params = outcome.params
    print(f"\nSecAgg+ sum vs plain sum over {difference.numel()} coordinates: max |error| "
          f"{max(e for e, _ in errors):.3g}, RMS {max(r for _, r in errors):.3g} "
          f"(level 2c/T = {quantisation.step:.3g}, "
          f"bound {quantisation.max_sum_error(COHORT):.3g})")
    written = json.loads(result.result_path.read_text())
    assert result.result_path.name == RESULT_FILE
    assert [r["noise_std"] for r in written["rounds"]] == [0.0, 0.0]
    assert not {"cohort", "cohort_sampled", "survivors"} & {k for r in written["rounds"] for k in r}  # released
    assert result.diagnostics_path is not None and result.diagnostics_path.name == DIAGNOSTICS_FILE
    outside = json.loads(result.diagnostics_path.read_text())["rounds"]  # the cohorts: outside DP
    assert [(r["cohort"], r["survivors"]) for r in outside] == [(o.cohort, o.survivors) for o in rounds]
    assert math.isinf(result.epsilon)  # no noise: nothing private to report


def test_server_noise_has_std_zc_over_m_and_epsilon_is_dp_accountings(noise_off, four_users, tmp_path):
    _, _, quiet = noise_off
    config = _config(four_users, tmp_path, Z, rounds=2)
    result, noisy = _run(config)
    assert noisy[0].cohort == quiet[0].cohort  # same seed: same cohort and the same start model in round 0
    released, released_without_noise = noisy[0].released_mean, quiet[0].released_mean
    noise = torch.cat([(released[k] - released_without_noise[k]).flatten() for k in released])
    expected_std = Z * CLIP / COHORT
    assert noisy[0].noise_std == expected_std
    print(f"\nnoise over {noise.numel()} coordinates: std {float(noise.std()):.5g} (z·C/m = {expected_std:g})")
    assert float(noise.std()) == pytest.approx(expected_std, rel=0.02)
    assert abs(float(noise.mean())) < 5 * expected_std / math.sqrt(noise.numel())
    # and it is the draw of fedpub's seeded noise step, as the in-process engine makes it
    experiment = build_experiment(config)
    params, privacy_seed = model_params(experiment.new_model()), experiment.strategy.seed
    ctx = RoundContext(
        round=0, seed=privacy_seed, population=4, sampling_rate=0.5, expected_cohort=COHORT, cohort_size=COHORT
    )
    step = gaussian_noise(Z, privacy_seed)
    draw = step.update(tree.zeros_like(params), step.init(params), ctx=ctx, clip_norm=CLIP).updates
    torch.testing.assert_close(noise, torch.cat([v.flatten() for v in draw.values()]), rtol=0, atol=1e-6)

    accountant = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    )
    round_event = dp_event.SampledWithoutReplacementDpEvent(4, COHORT, dp_event.GaussianDpEvent(Z / 2))
    accountant.compose(dp_event.SelfComposedDpEvent(round_event, 2))
    assert result.epsilon == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9)
    assert [r["epsilon"] for r in json.loads(result.result_path.read_text())["rounds"]] == [r.epsilon for r in noisy]

    # the trusted-server path (server-side clipping, in-process) with the same seed reaches the same model
    local = run_in_process(build_experiment(config), RunDirectory(tmp_path / "inprocess" / config.name))
    for k in local.params:
        torch.testing.assert_close(result.params[k], local.params[k], rtol=1e-4, atol=1e-5)


def test_dp_ftrl_with_secagg_noises_the_secure_sums_with_the_tree_and_reaches_the_in_process_model(
    four_users, tmp_path
):
    """4 users in 2 blocks of 2 an epoch, 3 rounds: a tree of 2 rounds, then one of 1; the server adds the
    recipe's tree noise to the unmasked sums and the round driver composes each tree when it starts."""
    config = tiny_config(
        four_users, tmp_path, rounds=3, data={"synthetic": USERS}, flower=FLOWER,
        strategy={"name": "dp_ftrl", "clip_norm": CLIP, "noise_multiplier": Z,
                  "sampling": {"kind": "epoch_blocks", "clients_per_round": COHORT}},
        privacy={"delta": 1e-5, "accountant": "rdp"},
    )
    result, rounds = _run(config)
    experiment = build_experiment(config)
    assert sorted(rounds[0].cohort + rounds[1].cohort) == sorted(experiment.private_ids)
    assert [r.noise_std for r in rounds] == [Z * CLIP / COHORT] * 3
    tree_event = dp_event.SingleEpochTreeAggregationDpEvent
    accountant = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    )
    accountant.compose(tree_event(Z, 2)).compose(tree_event(Z, 1))
    assert result.epsilon == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9)
    events = [r["event"] for r in json.loads(result.result_path.read_text())["rounds"]]
    assert [e["type"] for e in events] == ["SingleEpochTreeAggregationDpEvent", "NoOpDpEvent",
                                           "SingleEpochTreeAggregationDpEvent"]
    local = run_in_process(experiment, RunDirectory(tmp_path / "inprocess" / config.name))
    for k in local.params:
        torch.testing.assert_close(result.params[k], local.params[k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cohort", [2, 3, 50])
def test_quantisation_range_keeps_m_extreme_updates_from_wrapping(cohort):
    """Flower's own quantise → sum mod M → dequantise, as the workflow does it, without the masks (they
    cancel): m users at the extremes ±c sum to ±m·c with the chosen T; twice that T would wrap."""
    from flwr.common.secure_aggregation.ndarrays_arithmetic import parameters_mod
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    def secure_sum(q_range):
        update = [np.array([CLIP, -CLIP, 0.0])]
        total = sum(quantize(update, CLIP, q_range)[0].astype(np.int64) for _ in range(cohort))
        weights = cohort * q_range  # the weight total travels in the same modular sum
        [recovered] = dequantize(parameters_mod([total], q.modulus_range), CLIP, q_range)
        mean = (recovered - (cohort - 1) * CLIP) * q_range / (weights % q.modulus_range)
        return mean * cohort

    q = quantisation_for(CLIP, cohort)
    assert cohort * q.quantization_range < q.modulus_range
    np.testing.assert_allclose(secure_sum(q.quantization_range), [cohort * CLIP, -cohort * CLIP, 0.0],
                               atol=q.max_sum_error(cohort))
    if 2 * q.quantization_range < 2**31:  # (the clients' rounding casts to int32)
        assert 2 * q.quantization_range * cohort >= q.modulus_range
        assert not np.allclose(secure_sum(2 * q.quantization_range), [cohort * CLIP, -cohort * CLIP, 0.0])


def test_poisson_sampling_and_server_side_recipes_are_refused(four_users, tmp_path):
    poisson = tiny_config(four_users, tmp_path, data={"synthetic": USERS},
                          strategy={"sampling": {"kind": "poisson", "clients_per_round": 2}})
    with pytest.raises(ValueError, match="sampling.kind: fixed"):
        check_supported(poisson)
    adaptive = _config(four_users, tmp_path, 1.0, rounds=1).model_dump(mode="json")
    adaptive["strategy"]["adaptive_clip"] = {}
    with pytest.raises(ValueError, match="adaptive_clip"):
        check_supported(parse_config(adaptive))
