"""TFF's CIFAR-100 ResNet-18 with group norm: its layers and parameter count against TFF's ``create_resnet18``, Keras
'same' padding, and the group norm the model declares (the initialiser refuses an undeclared one)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedpub.data import registry
from fedpub.models import build_model, init_parameters
from fedpub.models.cifar100 import ResNet18GroupNorm, SamePad
from fedpub.tasks import CLASSIFICATION

NAME = "cifar100_resnet18_gn"


def tff_resnet18_parameters(num_classes: int) -> int:
    """TFF ``resnet_models.create_resnet18`` counted from its source: the 7x7 stem, per stage two basic blocks of two
    3x3 convolutions (the first block of stages 2-4 also a 1x1 projection), no biases in convolutions, group norm
    without weights, a dense layer with bias."""
    total, channels = 7 * 7 * 3 * 64, 64
    for width in (64, 128, 256, 512):
        total += 3 * 3 * channels * width + 3 * 3 * width * width + (channels * width if channels != width else 0)
        total += 2 * 3 * 3 * width * width
        channels = width
    return total + channels * num_classes + num_classes


def test_the_parameter_count_is_tffs() -> None:
    model = build_model(NAME, 100)
    assert tff_resnet18_parameters(100) == 11_218_212
    assert sum(p.numel() for p in model.parameters()) == 11_218_212
    convolutions = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convolutions) == 1 + 16 + 3 and all(m.bias is None for m in convolutions)
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 1 + 15 + 3 + 1  # stem, the 15 normalised convolutions, 3 projections, the final one
    assert all(m.num_groups == 2 and m.eps == 1e-3 and not m.affine for m in norms)
    assert not list(model.buffers())  # no running statistics: every user's forward pass is its own


def test_the_stem_pads_like_keras_and_the_stages_keep_six_by_six_maps() -> None:
    x = torch.arange(24.0).repeat(24, 1)[None, None]
    assert SamePad(7, 2)(x).shape[-2:] == (24 + 5, 24 + 5)  # Keras: 2 before, 3 after
    assert torch.equal(SamePad(7, 2)(x)[0, 0, 2, 2:-3], x[0, 0, 0])
    assert SamePad(3, 1)(x).shape[-2:] == (26, 26)
    model = build_model(NAME, 100).eval()
    shapes = []
    hooks = [block.register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape))) for block in list(model)[6:14]]
    with torch.no_grad():
        logits = model(torch.randn(2, 3, 24, 24, generator=torch.Generator().manual_seed(0)))
    for hook in hooks:
        hook.remove()
    assert logits.shape == (2, 100) and torch.isfinite(logits).all()
    assert shapes == [(2, 64, 6, 6)] * 2 + [(2, 128, 6, 6)] * 2 + [(2, 256, 6, 6)] * 2 + [(2, 512, 6, 6)] * 2


def test_the_group_norm_is_declared_and_an_undeclared_normalisation_is_refused() -> None:
    assert registry.model(NAME).normalization == ("GroupNorm",)
    with torch.device("meta"):
        model = ResNet18GroupNorm(100)
    model.to_empty(device="cpu")
    with pytest.raises(TypeError, match=r"layer '2' is a GroupNorm, a normalisation layer the model's declaration "
                                        r"does not list \(ModelDeclaration.normalization: none\)"):
        init_parameters(model, torch.Generator().manual_seed(0))
    batch_norm = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    with pytest.raises(TypeError, match="is a BatchNorm1d"):
        init_parameters(batch_norm, torch.Generator().manual_seed(0), normalization=("GroupNorm",))
    affine = nn.GroupNorm(2, 4)
    nn.init.normal_(affine.weight)
    init_parameters(nn.Sequential(affine), torch.Generator().manual_seed(0), normalization=("GroupNorm",))
    assert torch.equal(affine.weight, torch.ones(4)) and torch.equal(affine.bias, torch.zeros(4))


def test_the_model_trains_on_the_task_and_vectorises() -> None:
    from fedpub.clients.cohort_training import vectorisation_blocker

    model = build_model(NAME, 100)
    assert vectorisation_blocker(model, CLASSIFICATION) is None
    x, y = torch.randn(4, 3, 24, 24, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 5, 99, 5])
    loss = CLASSIFICATION.loss(model(x), y)
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in model.parameters())
