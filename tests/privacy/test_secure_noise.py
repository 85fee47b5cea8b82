"""The secure Gaussian sampler (fedpub/privacy/secure_noise.py) on the real OpenDP library: its std, the zCDP its
privacy map charges, what it refuses, and the error naming the extra when OpenDP is missing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

from fedpub.privacy.secure_noise import EXTRA, add_secure_gaussian, gaussian_mechanism

needs_opendp = pytest.mark.skipif(
    importlib.util.find_spec("opendp") is None, reason=f"OpenDP is not installed (pip install 'fedpub[{EXTRA}]')"
)


@needs_opendp
def test_the_noise_has_the_requested_std_and_keeps_dtype_and_shape():
    n, std = 40_000, 0.37
    values = torch.randn(200, 200, generator=torch.Generator().manual_seed(0))
    noisy = add_secure_gaussian(values, std)
    assert noisy.shape == values.shape and noisy.dtype == torch.float32
    noise = (noisy - values).double().flatten()
    # the sample std of n normals has relative standard error 1/sqrt(2n) = 0.35%: 2% is 5.7 of them
    assert abs(noise.std().item() / std - 1) < 0.02
    assert abs(noise.mean().item()) < 5 * std / n**0.5


@needs_opendp
def test_the_privacy_map_charges_the_continuous_gaussians_zcdp():
    """At OpenDP's default granularity the float input is not rounded, so nothing is added to the sensitivity:
    Δ²/(2σ²), what GaussianDpEvent(σ/Δ) costs in zCDP (RDP α·Δ²/(2σ²))."""
    for std, sensitivity in [(1.0, 1.0), (0.8, 0.05), (3.3, 2.0)]:
        rho = gaussian_mechanism(std).map(sensitivity)
        assert rho == pytest.approx(sensitivity**2 / (2 * std**2), rel=1e-12)


@needs_opendp
def test_no_noise_is_the_identity_and_non_finite_values_are_refused():
    values = torch.tensor([1.5, -2.0])
    assert torch.equal(add_secure_gaussian(values, 0.0), values)
    with pytest.raises(ValueError, match="finite values"):
        add_secure_gaussian(torch.tensor([1.0, float("inf")]), 1.0)
    with pytest.raises(ValueError, match="finite number >= 0"):
        add_secure_gaussian(values, float("nan"))


def test_a_missing_opendp_is_named_with_the_extra_to_install():
    """In a fresh interpreter where ``import opendp`` fails, asking for the sampler names the extra."""
    code = (
        "import sys; sys.modules['opendp'] = None\n"
        "from fedpub.steps.gaussian_noise import gaussian_noise\n"
        "try:\n    gaussian_noise(1.0, 0, secure_sampler=True)\n"
        "except ImportError as error:\n    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "privacy.noise_sampler `opendp`" in out and f"pip install 'fedpub[{EXTRA}]'" in out
