"""Banded MF noise (Choquette-Choo et al. 2023): the released prefix sums' noise covariance is B·Bᵀ·(zC/m)², the
recursion is the factorization's C⁻¹Z, one band is DP-FedAvg's Gaussian noise bit for bit, and the declared event
is the Gaussian at the factorization's sensitivity."""

import math

import dp_accounting
import numpy as np
import pytest
import torch

from fedpub.privacy.banded_factorization import BandedFactorization, banded_square_root, optimized_banded, workload
from fedpub.seeding import torch_generator
from fedpub.steps.banded_noise import banded_noise
from fedpub.steps.gaussian_noise import gaussian_noise
from fedpub.types import RoundContext

CLIP, Z, M = 0.5, 1.2, 5.0
STD = Z * CLIP / M  # the Gaussian's std on the mean


def _ctx(t: int) -> RoundContext:
    return RoundContext(round=t, seed=0, population=50, sampling_rate=0.1, expected_cohort=M, cohort_size=5)


def _rounds(step, rounds: int, zero: torch.Tensor) -> tuple[list[torch.Tensor], dict]:
    """The noise each of ``rounds`` rounds adds to the zero mean update ``zero``, and the last state."""
    state, released = step.init({"w": zero}), []
    for t in range(rounds):
        result = step.update({"w": zero}, state, ctx=_ctx(t), clip_norm=CLIP)
        state = result.state
        released.append(result.updates["w"])
    return released, state


def _released_noise(step, rounds: int, dim: int, dtype=torch.float32) -> np.ndarray:
    """The noise each round adds to a zero mean update, as an array (dim, rounds)."""
    return torch.stack(_rounds(step, rounds, torch.zeros(dim, dtype=dtype))[0], dim=1).double().numpy()


@pytest.mark.parametrize(("rounds", "bands", "momentum", "make"), [
    (6, 3, 0.0, banded_square_root), (5, 2, 0.9, optimized_banded), (6, 6, 0.0, banded_square_root)])
def test_the_released_prefix_sums_have_covariance_b_bt_within_its_standard_error(rounds, bands, momentum, make,
                                                                                   tmp_path):
    kwargs = {"cache": tmp_path} if make is optimized_banded else {}
    factorization = make(rounds, bands, momentum, **kwargs)
    # every coordinate of every seed is an independent draw of the rounds' noise vector
    noise = np.concatenate([_released_noise(banded_noise(factorization, Z, seed), rounds, 5000) for seed in range(4)])
    prefix = noise @ workload(rounds, momentum).T  # the released (momentum-weighted) prefix sums' noise
    empirical = prefix.T @ prefix / len(prefix)
    b = factorization.decoder()
    expected = b @ b.T * STD**2
    standard_error = np.sqrt((np.outer(np.diag(expected), np.diag(expected)) + expected**2) / len(prefix))
    assert np.all(np.abs(empirical - expected) < 5 * standard_error)
    a = workload(rounds, momentum)  # DP-FedAvg's independent noise: A·Aᵀ, which the test tells apart
    assert np.any(np.abs(empirical - a @ a.T * STD**2) > 5 * standard_error)


def test_the_recursion_is_the_factorizations_inverse_applied_to_the_draws():
    factorization = banded_square_root(7, 3, momentum=0.5)
    noise = _released_noise(banded_noise(factorization, Z, 11), 7, 50, dtype=torch.float64)
    generator = torch_generator(11, "gaussian_noise")
    draws = np.stack([torch.empty(50, dtype=torch.float64).normal_(generator=generator).numpy() for _ in range(7)])
    np.testing.assert_allclose(noise.T, factorization.noise(draws) * STD, rtol=1e-12, atol=1e-15)


def test_the_state_holds_the_last_bands_minus_one_noise_vectors():
    for rounds in range(1, 7):
        _, state = _rounds(banded_noise(banded_square_root(10, 4), Z, 0), rounds, torch.zeros(3))
        assert len(state["history"]) == min(rounds, 3)
    assert _rounds(banded_noise(banded_square_root(10, 1), Z, 0), 3, torch.zeros(3))[1]["history"] == []


def test_one_band_is_dp_fedavgs_gaussian_noise_bit_for_bit():
    params = {"w": torch.randn(4, 3, generator=torch.Generator().manual_seed(0)), "b": torch.ones(3)}
    banded, gaussian = banded_noise(banded_square_root(5, 1), Z, 9), gaussian_noise(Z, 9)
    banded_state, gaussian_state = banded.init(params), gaussian.init(params)
    for t in range(5):
        ours = banded.update(params, banded_state, ctx=_ctx(t), clip_norm=CLIP, noise_multiplier=0.7 + t / 10)
        theirs = gaussian.update(params, gaussian_state, ctx=_ctx(t), clip_norm=CLIP, noise_multiplier=0.7 + t / 10)
        assert all(torch.equal(ours.updates[k], theirs.updates[k]) for k in params)
        assert ours.events == theirs.events
        banded_state, gaussian_state = ours.state, theirs.state


def test_the_declared_event_is_the_gaussian_at_the_factorizations_sensitivity():
    unnormalised = BandedFactorization((2.0, 1.0), rounds=4, bands=2, momentum=0.0, kind="bsr")
    step = banded_noise(unnormalised, 3.0, 0)
    assert step.releases(2).events == (dp_accounting.GaussianDpEvent(3.0 / math.sqrt(5)),)
    assert step.releases(0, noise_multiplier=1.0).events == (dp_accounting.GaussianDpEvent(1.0 / math.sqrt(5)),)
    assert banded_noise(banded_square_root(4, 2), 3.0, 0).releases(1).events == (
        dp_accounting.GaussianDpEvent(pytest.approx(3.0)),)


def test_no_noise_and_bad_inputs():
    step = banded_noise(banded_square_root(4, 2), 0.0, 0)
    params = {"w": torch.ones(3)}
    result = step.update(params, step.init(params), ctx=_ctx(0), clip_norm=math.inf)
    assert torch.equal(result.updates["w"], params["w"])
    with pytest.raises(ValueError, match="finite clip_norm"):
        banded_noise(banded_square_root(4, 2), 1.0, 0).update(params, step.init(params), ctx=_ctx(0),
                                                                clip_norm=math.inf)
    with pytest.raises(ValueError, match="noise_multiplier must be a finite number >= 0"):
        banded_noise(banded_square_root(4, 2), -1.0, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_noise_for_a_model_on_the_gpu_is_drawn_there_and_reproduced_by_the_seed():
    factorization = banded_square_root(6, 3)
    (first, state), (again, _) = (_rounds(banded_noise(factorization, Z, 3), 6, torch.zeros(400_000, device="cuda"))
                                  for _ in range(2))
    assert all(a.device.type == "cuda" and torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert [w["w"].device.type for w in state["history"]] == ["cuda", "cuda"]
    inverse = np.linalg.inv(factorization.matrix())  # round t's noise has std STD·√((C⁻¹C⁻ᵀ)_tt)
    expected = STD * np.sqrt(np.diag(inverse @ inverse.T))
    assert [w.double().std().item() for w in first] == pytest.approx(expected, rel=0.01)
