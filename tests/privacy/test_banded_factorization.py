"""Banded matrix factorizations of the prefix-sum workload (Choquette-Choo et al. 2023; Kalinin and Lampert 2024):
the band, the normalisation, A = B·C, the closed-form square root, the optimisation against it, the noise
recursion and its released covariance, the cache priced on load, and the argument errors."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

import numpy as np
import pytest

import fedpub.privacy.banded_factorization as banded
from fedpub.privacy.banded_factorization import (
    CACHE_FILE,
    BandedFactorization,
    banded_square_root,
    optimized_banded,
    workload,
)

SETTINGS = [(1, 1, 0.0), (8, 1, 0.5), (16, 3, 0.0), (16, 3, 0.9), (20, 20, 0.0), (20, 20, 0.5), (32, 4, 0.0)]
"""(rounds, bands, momentum)"""


def both(rounds: int, bands: int, momentum: float, cache: Path) -> list[BandedFactorization]:
    return [banded_square_root(rounds, bands, momentum), optimized_banded(rounds, bands, momentum, cache=cache)]


def test_workload_is_prefix_sums_of_momentum() -> None:
    assert np.array_equal(workload(4), np.tril(np.ones((4, 4))))
    beta = 0.5
    momentum = np.tril([[beta ** (t - s) if s <= t else 0.0 for s in range(5)] for t in range(5)])
    np.testing.assert_allclose(workload(5, beta), np.tril(np.ones((5, 5))) @ momentum, rtol=1e-15)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_one_band_is_dp_fedavg(momentum: float, tmp_path: Path) -> None:
    """b = 1: C = I exactly, B = A, and the noise is the draws bit for bit."""
    z = np.random.default_rng(0).standard_normal((12, 5))
    for factorization in both(12, 1, momentum, tmp_path):
        assert factorization.coefficients == (1.0,)
        assert np.array_equal(factorization.matrix(), np.eye(12))
        assert np.array_equal(factorization.decoder(), workload(12, momentum))
        assert factorization.relative_error() == 1.0
        assert np.array_equal(factorization.noise(z), z)


@pytest.mark.parametrize(("rounds", "bands", "momentum"), SETTINGS)
def test_band_norms_and_decoder(rounds: int, bands: int, momentum: float, tmp_path: Path) -> None:
    for factorization in both(rounds, bands, momentum, tmp_path):
        c = factorization.matrix()
        lags = np.subtract.outer(np.arange(rounds), np.arange(rounds))
        assert np.all(c[(lags < 0) | (lags >= bands)] == 0)
        assert np.all(np.diagonal(c) == factorization.coefficients[0]) and factorization.coefficients[0] > 0
        norms = np.linalg.norm(c, axis=0)
        np.testing.assert_allclose(factorization.column_norms(), norms, rtol=1e-14)
        assert np.all(norms <= 1 + 1e-12) and abs(norms.max() - 1) <= 1e-12
        assert abs(factorization.sensitivity() - 1) <= 1e-12
        b = factorization.decoder()
        np.testing.assert_allclose(b @ c, workload(rounds, momentum), rtol=0, atol=1e-9)
        np.testing.assert_allclose(factorization.expected_error(), np.sum(b**2), rtol=1e-12)
        a_norm = np.sum(workload(rounds, momentum) ** 2)
        np.testing.assert_allclose(factorization.relative_error(), np.sum(b**2) / a_norm, rtol=1e-12)


def test_square_root_coefficients_are_central_binomials() -> None:
    bsr = banded_square_root(30, 12)
    unnormalised = np.array(bsr.coefficients) / bsr.coefficients[0]
    np.testing.assert_allclose(unnormalised, [comb(2 * k, k) / 4**k for k in range(12)], rtol=1e-14)


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_full_band_square_root_squares_to_the_workload(momentum: float) -> None:
    """b = T: C·C = A, up to the normalisation's scale c_0² (the unnormalised c_0 is 1)."""
    c = banded_square_root(25, 25, momentum).matrix()
    np.testing.assert_allclose(c @ c / c[0, 0] ** 2, workload(25, momentum), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("rounds", "bands", "momentum"), SETTINGS)
def test_optimized_is_never_worse_than_the_square_root(rounds: int, bands: int, momentum: float,
                                                       tmp_path: Path) -> None:
    bsr, optimized = both(rounds, bands, momentum, tmp_path)
    assert optimized.kind == "optimized" and bsr.kind == "bsr"
    assert optimized.expected_error() <= bsr.expected_error()


def test_optimized_is_strictly_better_at_32_rounds_4_bands(tmp_path: Path) -> None:
    """Measured: BSR ‖B‖_F² = 200.148 (relative 0.3791), optimized 194.506 (0.3684), a ratio of 0.9718; with
    momentum 0.9, 6524.93 against 6512.03 (0.9980)."""
    for momentum, ratio in ((0.0, 0.975), (0.9, 0.999)):
        optimized = optimized_banded(32, 4, momentum, cache=tmp_path)
        assert optimized.expected_error() <= ratio * banded_square_root(32, 4, momentum).expected_error()


@pytest.mark.parametrize(("rounds", "bands", "momentum"),
                         [(32, 4, 0.0), (1000, 2, 0.0), (3000, 4, 0.9), (3000, 16, 0.5)])
def test_optimized_is_a_local_minimum(rounds: int, bands: int, momentum: float, tmp_path: Path) -> None:
    """No coefficient moved by ±1e-4 (then normalised) lowers the error. An L-BFGS-B whose first trial step
    overflowed stopped at BSR here (T = 1,000, b = 2: relative error 0.5567, where the minimum is 0.5064; T = 3,000,
    b = 4, momentum 0.9: 0.2511 against 0.2504), and such a move lowered its error by ~1e-6 relative."""
    optimized = optimized_banded(rounds, bands, momentum, cache=tmp_path)
    for j in range(1, bands):
        for step in (-1e-4, 1e-4):
            moved = np.array(optimized.coefficients)
            moved[j] += step
            moved = BandedFactorization(tuple(moved / np.linalg.norm(moved)), rounds, bands, momentum, "optimized")
            assert moved.expected_error() >= optimized.expected_error() * (1 - 1e-12), (j, step)


def test_a_second_band_helps(tmp_path: Path) -> None:
    """Measured at T = 32: ‖B‖_F² = 528 (= ‖A‖_F²) with one band, 301.01 with two."""
    one, two = optimized_banded(32, 1, cache=tmp_path), optimized_banded(32, 2, cache=tmp_path)
    assert one.expected_error() == 528.0 and two.expected_error() <= 0.6 * one.expected_error()


@pytest.mark.parametrize(("rounds", "bands", "momentum"), [(16, 3, 0.0), (16, 3, 0.9), (20, 20, 0.5)])
def test_noise_is_the_inverse_of_c(rounds: int, bands: int, momentum: float, tmp_path: Path) -> None:
    z = np.random.default_rng(1).standard_normal((rounds, 4))
    for factorization in both(rounds, bands, momentum, tmp_path):
        np.testing.assert_allclose(factorization.noise(z), np.linalg.solve(factorization.matrix(), z),
                                   rtol=1e-10, atol=1e-12)


def test_released_noise_has_covariance_b_bt(tmp_path: Path) -> None:
    """The prefix sums' noise A·W over 40,000 seeded draws has covariance B·Bᵀ to within 5 standard errors in every
    entry (each entry's standard error from the draws' products); A·Aᵀ, DP-FedAvg's covariance, is rejected.
    Measured with this seed: the largest deviation from B·Bᵀ is 2.05 standard errors, from A·Aᵀ 146 (and from the
    banded square root's B·Bᵀ, a near miss, 8.0)."""
    factorization = optimized_banded(6, 3, cache=tmp_path)
    draws = 40_000
    released = workload(6) @ factorization.noise(np.random.default_rng(2).standard_normal((6, draws)))
    products = released[:, None, :] * released[None, :, :]
    covariance = products.mean(axis=2)
    standard_error = products.std(axis=2) / np.sqrt(draws)
    decoder = factorization.decoder()
    assert np.all(np.abs(covariance - decoder @ decoder.T) <= 5 * standard_error)
    assert np.any(np.abs(covariance - workload(6) @ workload(6).T) > 5 * standard_error)


def test_second_call_reads_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDPUB_CACHE_DIR", str(tmp_path))
    first = optimized_banded(24, 5, 0.5)
    stored = json.loads((tmp_path / CACHE_FILE).read_text())
    assert [entry["coefficients"] for entry in stored.values()] == [list(first.coefficients)]

    def no_search(*args: object, **kwargs: object) -> None:
        raise AssertionError("the optimizer ran although the factorization is cached")

    monkeypatch.setattr(banded.scipy.optimize, "minimize", no_search)
    assert optimized_banded(24, 5, 0.5) == first
    with pytest.raises(AssertionError, match="cached"):  # any other setting is a miss
        optimized_banded(24, 6, 0.5)


def _scaled_up(entry: dict) -> None:
    entry["coefficients"][1] *= 1.5  # the full band's column norm exceeds 1


def _error_edited(entry: dict) -> None:
    entry["expected_error"] *= 0.5


def _no_entry(entry: dict) -> None:
    entry.clear()


@pytest.mark.parametrize(("tamper", "warning"), [
    (_scaled_up, "has a column norm"), (_error_edited, "stores expected error"), (_no_entry, "is not"),
])
def test_a_tampered_entry_is_recomputed_with_a_warning(tamper, warning: str, tmp_path: Path) -> None:
    first = optimized_banded(24, 5, 0.5, cache=tmp_path)
    path = tmp_path / CACHE_FILE
    stored = json.loads(path.read_text())
    (entry,) = stored.values()
    tamper(entry)
    path.write_text(json.dumps(stored))
    with pytest.warns(UserWarning, match=f"banded factorization cache {path}: .*{warning}.*recomputing"):
        assert optimized_banded(24, 5, 0.5, cache=tmp_path) == first
    assert json.loads(path.read_text()) == {key: {"coefficients": list(first.coefficients),
                                                  "expected_error": first.expected_error()} for key in stored}


def test_a_cached_entry_no_better_than_the_square_root_is_recomputed(tmp_path: Path) -> None:
    optimized_banded(24, 5, 0.5, cache=tmp_path)
    path = tmp_path / CACHE_FILE
    stored = json.loads(path.read_text())
    bsr = banded_square_root(24, 5, 0.5)
    worse = np.array(bsr.coefficients) + np.array([0.0, 0.0, 0.0, 0.0, 0.1])
    worse = BandedFactorization(tuple(worse / np.linalg.norm(worse)), 24, 5, 0.5, "optimized")
    assert worse.expected_error() > bsr.expected_error()
    path.write_text(json.dumps({key: {"coefficients": list(worse.coefficients),
                                      "expected_error": worse.expected_error()} for key in stored}))
    with pytest.warns(UserWarning, match="more than the banded square root's"):
        assert optimized_banded(24, 5, 0.5, cache=tmp_path).expected_error() < bsr.expected_error()


@pytest.mark.parametrize(("call", "argument"), [
    (lambda: workload(0), "rounds"),
    (lambda: workload(4.0), "rounds"),
    (lambda: workload(4, 1.0), "momentum"),
    (lambda: workload(4, -0.1), "momentum"),
    (lambda: banded_square_root(4, 5), "bands"),
    (lambda: banded_square_root(4, 0), "bands"),
    (lambda: banded_square_root(4, True), "bands"),
    (lambda: optimized_banded(4, 2, float("nan")), "momentum"),
    (lambda: optimized_banded(0, 1), "rounds"),
    (lambda: banded_square_root(8, 2).noise(np.zeros((7, 1))), "z"),
    (lambda: BandedFactorization((0.0, 1.0), 8, 2, 0.0, "bsr"), "coefficients"),
])
def test_argument_errors_name_the_argument(call, argument: str) -> None:
    with pytest.raises(ValueError, match=f"^{argument} must"):
        call()
