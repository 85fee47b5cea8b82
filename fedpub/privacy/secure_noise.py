"""Gaussian noise from a sampler hardened against floating-point attacks (``privacy.noise_sampler: opendp``).

The default noise is torch's ``normal_``: a textbook floating-point sampler, whose released ``value + noise``
lies on a float grid whose gaps depend on the value, so the low bits can tell neighbouring inputs apart
(Mironov 2012, "On significance of the least significant bits for differential privacy", for Laplace; Holohan
and Braghin 2021, "Secure random sampling in differential privacy", for Gaussian samplers). This module adds
the noise with OpenDP's Gaussian mechanism instead (``make_gaussian`` on a vector of float64 under the L2
distance, https://docs.opendp.org): OpenDP reads each float exactly as a rational number, adds discrete
Gaussian noise of scale σ on the grid 2^-1074 (its default granularity ``k``, on which every float64 lies, so
the discretisation adds nothing to the sensitivity), sampled exactly (Canonne, Kamath and Steinke 2020, "The
discrete Gaussian for differential privacy") from OpenSSL's CSPRNG, and rounds the exact noisy value to the
nearest float, which is post-processing. Its privacy map charges ρ = Δ²/(2σ²) zCDP, the continuous Gaussian's.

The randomness comes from the operating system and cannot be seeded: a run with this sampler is not
reproducible. OpenDP is an optional extra (``pip install 'fedpub[secure-noise]'``), imported on first use.
"""

from __future__ import annotations

from types import ModuleType

import torch

EXTRA = "secure-noise"
"""The optional dependency group of pyproject.toml that installs OpenDP."""


def _opendp() -> ModuleType:
    try:
        import opendp.prelude as dp
    except ImportError as error:
        raise ImportError(
            f"privacy.noise_sampler `opendp` needs the OpenDP library: pip install 'fedpub[{EXTRA}]'"
        ) from error
    dp.enable_features("contrib")  # make_gaussian has a proof that has not finished OpenDP's vetting (`contrib`)
    return dp


def require_secure_sampler() -> None:
    """Raise ImportError, naming the extra to install, when OpenDP is missing (call it when a run is built)."""
    _opendp()


def gaussian_mechanism(std: float):  # -> opendp.mod.Measurement, typed loosely to keep opendp optional
    """OpenDP's Gaussian mechanism of scale ``std`` on float64 vectors under the L2 distance, at OpenDP's default
    granularity (2^-1074: no rounding, so its map at sensitivity Δ is Δ²/(2·std²) zCDP, as a test checks)."""
    dp = _opendp()
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float)
    return dp.m.make_gaussian(*space, scale=float(std))


def add_secure_gaussian(values: torch.Tensor, std: float) -> torch.Tensor:
    """``values`` + N(0, std²) per entry by OpenDP's Gaussian mechanism, in ``values``' dtype and device (the
    float64 release is rounded to that dtype: post-processing). The values must be finite."""
    if not (std >= 0 and std < float("inf")):
        raise ValueError(f"the noise std must be a finite number >= 0, got {std}")
    if std == 0 or values.numel() == 0:
        return values.clone()
    flat = values.detach().to("cpu", torch.float64).reshape(-1)
    if not bool(torch.isfinite(flat).all()):
        raise ValueError("the secure sampler needs finite values: the update to noise has a NaN or an infinity")
    noisy = gaussian_mechanism(std)(flat.tolist())
    return torch.tensor(noisy, dtype=torch.float64).reshape(values.shape).to(values.device, values.dtype)
