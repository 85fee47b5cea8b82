"""Model registry: shapes, parameter counts, no batch norm, deterministic init from an explicit generator."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fedpub.clients.cohort_training import vectorisation_blocker
from fedpub.data.emnist import EmnistH5
from fedpub.data.synthetic_emnist import SyntheticEmnistSpec, write_synthetic_emnist
from fedpub.models import build_model
from fedpub.tasks import CLASSIFICATION

# (conv/linear weights + biases), counted by hand from the layer shapes.
PARAMS_10 = {
    "emnist_small_cnn": (25 * 16 + 16) + (16 * 25 * 32 + 32) + (512 * 10 + 10),
    "emnist_cnn_dropout": (9 * 32 + 32) + (32 * 9 * 64 + 64) + (9216 * 128 + 128) + (128 * 10 + 10),
    "emnist_mlp": (784 * 200 + 200) + (200 * 200 + 200) + (200 * 10 + 10),
    "emnist_softmax": 784 * 10 + 10,
}


@pytest.mark.parametrize("name", sorted(PARAMS_10))
@pytest.mark.parametrize("num_classes", [10, 62])
def test_shapes_and_parameter_counts(name: str, num_classes: int) -> None:
    model = build_model(name, num_classes)
    logits = model(torch.rand(5, 1, 28, 28, generator=torch.Generator().manual_seed(0)))
    assert logits.shape == (5, num_classes) and torch.isfinite(logits).all()
    last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    expected = PARAMS_10[name] + (num_classes - 10) * (last.in_features + 1)
    assert sum(p.numel() for p in model.parameters()) == expected
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def test_small_cnn_is_small() -> None:
    assert sum(p.numel() for p in build_model("emnist_small_cnn", 10).parameters()) < 25_000


def test_init_is_deterministic_and_leaves_global_rng_alone() -> None:
    state = torch.random.get_rng_state()
    a = build_model("emnist_small_cnn", 10, generator=torch.Generator().manual_seed(7))
    b = build_model("emnist_small_cnn", 10, generator=torch.Generator().manual_seed(7))
    c = build_model("emnist_small_cnn", 10, generator=torch.Generator().manual_seed(8))
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        assert not torch.equal(pa, pc), name
        assert pa.device.type == "cpu" and pa.requires_grad


def test_init_matches_pytorch_default_scale() -> None:
    model = build_model("emnist_mlp", 10)
    first = model[1]
    bound = 1.0 / 784**0.5  # kaiming_uniform(a=sqrt(5)) and the bias both have bound 1/sqrt(fan_in)
    assert first.weight.abs().max() <= bound and first.weight.abs().max() > 0.9 * bound
    assert first.bias.abs().max() <= bound


def test_dropout_only_in_cnn_dropout() -> None:
    rates = [m.p for m in build_model("emnist_cnn_dropout", 10).modules() if isinstance(m, nn.Dropout)]
    assert rates == [0.25, 0.5]
    for name in ("emnist_small_cnn", "emnist_mlp"):
        assert not any(isinstance(m, nn.Dropout) for m in build_model(name, 10).modules())


def test_unknown_name_lists_allowed() -> None:
    with pytest.raises(ValueError, match="unknown model 'resnet'") as err:
        build_model("resnet", 10)
    assert all(name in str(err.value) for name in PARAMS_10)
    with pytest.raises(ValueError, match="num_classes"):
        build_model("emnist_mlp", 1)


def test_softmax_has_7850_parameters_vectorises_and_learns_the_digits(tmp_path: Path) -> None:
    model = build_model("emnist_softmax", 10)
    assert sum(p.numel() for p in model.parameters()) == 7_850
    assert vectorisation_blocker(model, CLASSIFICATION) is None
    train_path, _ = write_synthetic_emnist(tmp_path, SyntheticEmnistSpec(num_writers=10, seed=1))
    with EmnistH5(train_path) as train:
        parts = [train.client_data(c) for c in train.client_ids]
    x, y = torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)  # raw pixels: inputs of norm about 25
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    for _ in range(20):
        for batch in order.split(32):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    assert accuracy > 0.5  # chance is 0.1
