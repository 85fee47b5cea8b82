import pytest
import torch

from fedpub.types import RoundContext


@pytest.fixture
def params() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(4, 3, generator=g), "b": torch.randn(3, generator=g)}


@pytest.fixture
def stacked(params) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {k: 3 * torch.randn(5, *v.shape, generator=g) for k, v in params.items()}


@pytest.fixture
def ctx() -> RoundContext:
    return RoundContext(round=0, seed=0, population=50, sampling_rate=0.1, expected_cohort=5.0, cohort_size=5)
