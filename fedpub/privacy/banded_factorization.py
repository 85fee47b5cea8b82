"""Banded matrix factorizations of the prefix-sum workload for DP-FTRL's correlated noise.

The server releases the prefix sums A·X of the rounds' aggregates X, A the T×T workload: the lower-triangular
all-ones matrix, or with server momentum β the product A = S·M of the all-ones S and the momentum matrix
M[t, s] = β^(t−s), the lower-triangular Toeplitz matrix of the generating function 1/((1−x)(1−βx)). A banded matrix
factorization A = B·C (Choquette-Choo, McMahan, Rush and Thakurta, "(Amplified) Banded Matrix Factorization: A
unified approach to private training", NeurIPS 2023) has C lower-triangular and b-banded (C[t, s] = 0 unless
0 ≤ t − s < b) with columns of L2 norm at most 1. The mechanism releases C·X plus Gaussian noise Z, so round t adds
w_t = (C⁻¹Z)_t to its aggregate, and the released prefix sums carry the noise A·W = B·Z: an expected total squared
error of ‖B‖_F² per unit noise variance. A user who participates at most once every b rounds touches disjoint rows
of C·X, so the sensitivity is C's largest column norm. b = 1 is C = I, B = A: DP-FedAvg's independent noise.

Every factorization here is Toeplitz: C[t, s] = c_(t−s) for 0 ≤ t − s < b, given by its b coefficients
c_0 > 0, ..., c_(b−1). Lower-triangular Toeplitz matrices multiply as their generating functions do (truncated to
T terms), so B = A·C⁻¹ is the Toeplitz matrix of the series a(x)/c(x), whose first T coefficients g follow from the
b-term recursion c_0 g_k = a_k − Σ_(j=1..b−1) c_j g_(k−j), and ‖B‖_F² = Σ_k (T − k) g_k²: O(T·b), never a T×T
matrix. The round's noise w_t follows the same recursion from the last b − 1 noise vectors (:meth:`noise`). Column s
of C holds c_0, ..., c_(min(b, T−s)−1), so the first T − b + 1 columns (the full band) have the largest norm, ‖c‖₂:
the sensitivity is ‖c‖₂, and a factorization is normalised by dividing c by it.

- :func:`banded_square_root` is the banded square root (BSR; Kalinin and Lampert, "Banded Square Root Matrix
  Factorization for Differentially Private Model Training", NeurIPS 2024): c is the first b Taylor coefficients of
  √a(x), normalised. For plain prefix sums these are binom(2k, k)/4^k, the coefficients of (1−x)^(−1/2); with
  momentum the convolution of those with (binom(2k, k)/4^k)·β^k. At b = T, C·C = A up to the normalisation.
- :func:`optimized_banded` minimises the expected error over the b coefficients (Choquette-Choo et al. 2023's
  banded optimisation, here restricted to Toeplitz C): L-BFGS-B from BSR on the scale-invariant
  ‖A·C(c)⁻¹‖_F²·‖c‖₂² with an analytic O(T·b) gradient, never returning worse than BSR. Results are cached in
  ``banded_mf.json`` beside the calibration cache, and a cached entry is re-priced before use.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import Literal

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.signal

from fedpub import __version__ as fedpub_version
from fedpub.privacy.calibration import default_cache_dir, read_cache, write_cache

FactorizationKind = Literal["bsr", "optimized"]
CACHE_FILE = "banded_mf.json"
_NORM_SLACK = 1e-12  # a cached factorization's column norms may exceed 1 by this much (rounding)
_STEP_SCALE = 1e-2  # the optimiser's variables are the coefficients over this (see _optimized)
_ERROR_RTOL = 1e-9  # a cached entry's stored expected error must match the recomputed one to this relative tolerance


def workload(rounds: int, momentum: float = 0.0) -> np.ndarray:
    """The T×T workload A of the released prefix sums: lower-triangular all-ones, or with server momentum β the
    all-ones S times the momentum matrix M[t, s] = β^(t−s) (s ≤ t)."""
    _check_rounds(rounds)
    _check_momentum(momentum)
    column = _workload_series(rounds, momentum)
    return scipy.linalg.toeplitz(column, np.zeros(rounds))


@dataclass(frozen=True)
class BandedFactorization:
    """A = B·C with C the b-banded lower-triangular Toeplitz matrix of ``coefficients`` c_0 > 0, ..., c_(b−1)
    over ``rounds`` rounds, for the workload of ``momentum``; ``kind`` says how c was found."""

    coefficients: tuple[float, ...]
    rounds: int
    bands: int
    momentum: float
    kind: FactorizationKind

    def __post_init__(self) -> None:
        _check_rounds(self.rounds)
        _check_bands(self.bands, self.rounds)
        _check_momentum(self.momentum)
        if len(self.coefficients) != self.bands:
            raise ValueError(f"coefficients must hold bands={self.bands} values, got {len(self.coefficients)}")
        if not all(math.isfinite(c) for c in self.coefficients) or not self.coefficients[0] > 0:
            raise ValueError(f"coefficients must be finite with coefficients[0] > 0, got {self.coefficients!r}")
        if self.kind not in ("bsr", "optimized"):
            raise ValueError(f"kind must be 'bsr' or 'optimized', got {self.kind!r}")

    def matrix(self) -> np.ndarray:
        """C (T×T): C[t, s] = c_(t−s) for 0 ≤ t − s < b, else 0."""
        column = np.zeros(self.rounds)
        column[: self.bands] = self.coefficients
        return scipy.linalg.toeplitz(column, np.zeros(self.rounds))

    def column_norms(self) -> np.ndarray:
        """The L2 norm of each column of C: column s holds c_0, ..., c_(min(b, T−s)−1)."""
        prefix = np.sqrt(np.cumsum(np.square(self.coefficients)))
        return prefix[np.minimum(self.bands, self.rounds - np.arange(self.rounds)) - 1]

    def sensitivity(self) -> float:
        """C's largest column norm, ‖c‖₂ (the full band's columns): the L2 sensitivity of C·X to one user whose
        participations are at least b rounds apart (each touches one column, on disjoint rows)."""
        return float(np.linalg.norm(self.coefficients))

    def decoder(self) -> np.ndarray:
        """B = A·C⁻¹ (T×T), by a triangular solve of Cᵀ·Bᵀ = Aᵀ."""
        return scipy.linalg.solve_triangular(self.matrix().T, workload(self.rounds, self.momentum).T, lower=False).T

    def expected_error(self) -> float:
        """‖B‖_F²: the expected total squared error of the T released prefix sums per unit noise variance."""
        return _squared_error(np.asarray(self.coefficients), _workload_series(self.rounds, self.momentum))

    def relative_error(self) -> float:
        """:meth:`expected_error` over DP-FedAvg's ‖A‖_F² (b = 1, independent noise of the same sensitivity)."""
        weights = self.rounds - np.arange(self.rounds)
        return self.expected_error() / float(weights @ np.square(_workload_series(self.rounds, self.momentum)))

    def noise(self, z: np.ndarray) -> np.ndarray:
        """The rounds' noise W = C⁻¹Z for Gaussian draws ``z`` of shape (T, d), by the recursion
        w_t = (z_t − Σ_(j=1..min(b−1, t)) c_j w_(t−j)) / c_0, which reads only the last b − 1 noise vectors."""
        z = np.asarray(z, dtype=float)
        if z.ndim != 2 or z.shape[0] != self.rounds:
            raise ValueError(f"z must have shape (rounds={self.rounds}, d), got {z.shape}")
        c = self.coefficients
        w = np.empty_like(z)
        for t in range(self.rounds):
            drawn = z[t]
            for j in range(1, min(self.bands - 1, t) + 1):
                drawn = drawn - c[j] * w[t - j]
            w[t] = drawn / c[0]
        return w


def banded_square_root(rounds: int, bands: int, momentum: float = 0.0) -> BandedFactorization:
    """The banded square root (Kalinin and Lampert 2024): the first ``bands`` Taylor coefficients of the square
    root of the workload's generating function, scaled so that the largest column norm is 1."""
    _check_rounds(rounds)
    _check_bands(bands, rounds)
    _check_momentum(momentum)
    return _normalised(_square_root_series(bands, momentum), rounds, momentum, "bsr")


def optimized_banded(
    rounds: int, bands: int, momentum: float = 0.0, *, cache: Path | None = None
) -> BandedFactorization:
    """The b-banded Toeplitz factorization of least expected error with column norms at most 1 (Choquette-Choo
    et al. 2023, restricted to Toeplitz C), never worse than :func:`banded_square_root`. Cached in the folder
    ``cache`` (default: the calibration cache's, ``$FEDPUB_CACHE_DIR`` or ``~/.cache/fedpub``), file
    ``banded_mf.json``; a cached entry is re-priced on load, and one that fails is recomputed with a warning."""
    bsr = banded_square_root(rounds, bands, momentum)  # checks the arguments
    path = (default_cache_dir() if cache is None else Path(cache)) / CACHE_FILE
    key = json.dumps(
        {"rounds": int(rounds), "bands": int(bands), "momentum": float(momentum), "kind": "optimized", "fedpub": fedpub_version},
        sort_keys=True,
    )
    entries = read_cache(path, "banded factorization")
    if key in entries:
        cached, problem = _priced(entries[key], bsr)
        if cached is not None:
            return cached
        warnings.warn(f"banded factorization cache {path}: its entry for rounds={rounds}, bands={bands}, "
                      f"momentum={momentum:g} {problem}; recomputing", stacklevel=2)
    found = min((_optimized(bsr), bsr), key=lambda f: f.expected_error())
    result = BandedFactorization(found.coefficients, rounds, bands, float(momentum), "optimized")
    entries[key] = {"coefficients": list(result.coefficients), "expected_error": result.expected_error()}
    write_cache(path, entries, "banded factorization")
    return result


def _optimized(bsr: BandedFactorization) -> BandedFactorization:
    """L-BFGS-B from BSR over c = (1, θ) (the objective is scale-invariant, so c_0 is fixed at 1) on
    log(‖A·C(c)⁻¹‖_F² · ‖c‖₂²), normalised; as it is for b = 1, where there is nothing to optimise.

    Where c(x) has a root inside the unit disk the series a(x)/c(x) grows geometrically and, over thousands of
    rounds, overflows: the objective is then +inf. L-BFGS-B's first trial step has length 1 in its variables,
    which from BSR lands there for long runs (T = 1,000, b = 2 stopped at BSR's error), so it searches over
    y = θ/_STEP_SCALE: a first step of 0.01 in the coefficients; from then on its curvature estimate sets the
    steps, and the result does not move with the scale (1e-2 and 1e-3 reach the same errors)."""
    if bsr.bands == 1:
        return bsr
    series = _workload_series(bsr.rounds, bsr.momentum)
    start = np.asarray(bsr.coefficients)

    def objective(y: np.ndarray) -> tuple[float, np.ndarray]:
        theta = y * _STEP_SCALE
        c = np.concatenate(([1.0], theta))
        with np.errstate(over="ignore", invalid="ignore"):
            error, gradient = _squared_error_and_gradient(c, series)
        if not math.isfinite(error) or not np.all(np.isfinite(gradient)):
            return math.inf, np.zeros_like(theta)
        norm = float(c @ c)
        return math.log(error) + math.log(norm), _STEP_SCALE * (gradient[1:] / error + 2 * theta / norm)

    found = scipy.optimize.minimize(
        objective, start[1:] / start[0] / _STEP_SCALE, jac=True, method="L-BFGS-B",
        options={"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-10 * _STEP_SCALE},
    )
    return _normalised(np.concatenate(([1.0], found.x * _STEP_SCALE)), bsr.rounds, bsr.momentum, "optimized")


def _squared_error(c: np.ndarray, series: np.ndarray) -> float:
    """‖A·C⁻¹‖_F² for the Toeplitz C of ``c`` and the workload's first column ``series``."""
    g = scipy.signal.lfilter([1.0], c, series)
    return float((len(series) - np.arange(len(series))) @ np.square(g))


def _squared_error_and_gradient(c: np.ndarray, series: np.ndarray) -> tuple[float, np.ndarray]:
    """‖A·C⁻¹‖_F² and its gradient in c, in O(T·b). B is the Toeplitz matrix of g = C⁻¹a (the recursion
    c * g = a); from dg/dc_j = −C⁻¹(g shifted down by j), with v = (T − k)·g_k and u = C⁻ᵀv (the same
    recursion run backwards), d‖B‖_F²/dc_j = −2 Σ_(k≥j) u_k g_(k−j)."""
    rounds = len(series)
    g = scipy.signal.lfilter([1.0], c, series)
    v = (rounds - np.arange(rounds)) * g
    u = scipy.signal.lfilter([1.0], c, v[::-1])[::-1]
    gradient = np.array([-2.0 * (u[j:] @ g[: rounds - j]) for j in range(len(c))])
    return float(v @ g), gradient


def _workload_series(rounds: int, momentum: float) -> np.ndarray:
    """The first column of A: the first T coefficients of 1/((1−x)(1−βx)), Σ_(i≤k) β^i."""
    return np.cumsum(np.power(float(momentum), np.arange(rounds)))


def _square_root_series(terms: int, momentum: float) -> np.ndarray:
    """The first ``terms`` coefficients of ((1−x)(1−βx))^(−1/2): r_k = binom(2k, k)/4^k (those of (1−x)^(−1/2))
    convolved with r_k·β^k."""
    k = np.arange(1, terms)
    r = np.concatenate(([1.0], np.cumprod((2 * k - 1) / (2 * k))))
    if momentum == 0:
        return r
    return np.convolve(r, r * np.power(float(momentum), np.arange(terms)))[:terms]


def _normalised(c: np.ndarray, rounds: int, momentum: float, kind: FactorizationKind) -> BandedFactorization:
    """The factorization of c scaled so that its largest column norm, ‖c‖₂, is 1."""
    return BandedFactorization(tuple(float(x) for x in c / np.linalg.norm(c)), rounds, len(c), float(momentum), kind)


def _priced(entry: object, bsr: BandedFactorization) -> tuple[BandedFactorization | None, str]:
    """A cached entry as a factorization if it is one (finite coefficients, c_0 > 0, column norms ≤ 1, its stored
    expected error the recomputed one, no worse than BSR's), else None and what is wrong with it."""
    if not isinstance(entry, dict) or not isinstance(entry.get("coefficients"), list) or not isinstance(
        entry.get("expected_error"), float
    ):
        return None, "is not {'coefficients': [...], 'expected_error': float}"
    if not all(isinstance(c, float) for c in entry["coefficients"]):
        return None, "has coefficients that are not numbers"
    try:
        cached = BandedFactorization(tuple(entry["coefficients"]), bsr.rounds, bsr.bands, bsr.momentum, "optimized")
    except ValueError as err:
        return None, f"is no factorization ({err})"
    if (largest := float(cached.column_norms().max())) > 1 + _NORM_SLACK:
        return None, f"has a column norm {largest!r} > 1"
    error = cached.expected_error()
    if not math.isclose(error, entry["expected_error"], rel_tol=_ERROR_RTOL):
        return None, f"stores expected error {entry['expected_error']!r}, but its coefficients give {error!r}"
    if error > bsr.expected_error() * (1 + _ERROR_RTOL):
        return None, f"has expected error {error!r}, more than the banded square root's {bsr.expected_error()!r}"
    return cached, ""


def _check_rounds(rounds: object) -> None:
    if isinstance(rounds, bool) or not isinstance(rounds, Integral) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")


def _check_bands(bands: object, rounds: int) -> None:
    if isinstance(bands, bool) or not isinstance(bands, Integral) or not 1 <= bands <= rounds:
        raise ValueError(f"bands must be an integer with 1 <= bands <= rounds={rounds}, got {bands!r}")


def _check_momentum(momentum: object) -> None:
    if isinstance(momentum, bool) or not isinstance(momentum, Real) or not 0 <= momentum < 1:
        raise ValueError(f"momentum must be a number in [0, 1), got {momentum!r}")
