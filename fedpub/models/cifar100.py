"""Federated CIFAR-100's model: TFF's baseline ResNet-18 with group normalisation, in PyTorch.

TFF ``simulation/baselines/cifar100/resnet_models.py`` ``create_resnet18(input_shape=(24, 24, 3), num_classes=100)``
(ResNet v2, He et al. 2016, "Identity Mappings in Deep Residual Networks"): a 7×7 stride-2 convolution with 64
filters, group norm and ReLU, a 3×3 stride-2 max pool, then four stages of two basic blocks with 64, 128, 256 and
512 filters, a final group norm and ReLU, global average pooling and a dense layer. A basic block is
norm-ReLU-conv3×3, norm-ReLU-conv3×3 (the very first block skips its first norm-ReLU), added to its input, which
goes through a 1×1 convolution and a group norm when the channel count changes. TFF's stages keep strides (1, 1), so
after the stem the maps stay 6×6 for a 24×24 input. Convolutions have no bias. TFF's ``GroupNormalization`` uses 2
groups, epsilon 1e-3 and no scale or offset: ``nn.GroupNorm(2, C, eps=1e-3, affine=False)``. Keras ``'same'``
padding, uneven for the stride-2 stem and pool (more after than before), is reproduced by :class:`SamePad`.
Parameters: 11,218,212 for 100 classes, all in convolutions and the dense layer.

Differences from TFF's Keras model: the initialisation is PyTorch's (fedpub's initialiser for every model, not
Keras's he_normal and RandomNormal(0.01)); the output is logits (TFF's dense layer has a softmax, and its loss takes
probabilities); TFF's Keras model also carries an L2 penalty of 1e-4 on the kernels, which fedpub's local training
does not add.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

GROUPS = 2
EPSILON = 1e-3
WIDTHS = (64, 128, 256, 512)
BLOCKS_PER_STAGE = 2


def group_norm(channels: int) -> nn.GroupNorm:
    """TFF's ``GroupNormalization(groups=2, epsilon=1e-3)``: no learned scale or offset."""
    return nn.GroupNorm(GROUPS, channels, eps=EPSILON, affine=False)


class SamePad(nn.Module):
    """Keras ``padding='same'`` for a ``kernel``×``kernel`` window of stride ``stride``: the total padding that keeps
    ceil(size / stride) outputs, the odd pixel after (right and bottom), filled with ``value``."""

    def __init__(self, kernel: int, stride: int, value: float = 0.0) -> None:
        super().__init__()
        self.kernel, self.stride, self.value = kernel, stride, value

    def _pads(self, size: int) -> tuple[int, int]:
        total = max((math.ceil(size / self.stride) - 1) * self.stride + self.kernel - size, 0)
        return total // 2, total - total // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        top, bottom = self._pads(x.shape[-2])
        left, right = self._pads(x.shape[-1])
        return F.pad(x, (left, right, top, bottom), value=self.value)


class BasicBlock(nn.Module):
    """TFF ``_basic_block``: [norm-ReLU-]conv3×3, norm-ReLU-conv3×3, plus the (projected) input."""

    def __init__(self, in_channels: int, channels: int, *, normalize_first: bool) -> None:
        super().__init__()
        self.pre = nn.Sequential(group_norm(in_channels), nn.ReLU()) if normalize_first else nn.Identity()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, padding=1, bias=False)
        self.conv2 = nn.Sequential(
            group_norm(channels), nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        )
        self.shortcut: nn.Module = nn.Identity()
        if in_channels != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, channels, 1, bias=False), group_norm(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shortcut(x) + self.conv2(self.conv1(self.pre(x)))


class ResNet18GroupNorm(nn.Sequential):
    """TFF's ``create_resnet18`` with group norm: input ``(B, 3, 24, 24)`` (channels first), output logits."""

    def __init__(self, num_classes: int) -> None:
        layers: list[nn.Module] = [
            SamePad(7, 2), nn.Conv2d(3, WIDTHS[0], 7, stride=2, bias=False), group_norm(WIDTHS[0]), nn.ReLU(),
            SamePad(3, 2, value=-math.inf), nn.MaxPool2d(3, stride=2),
        ]
        in_channels = WIDTHS[0]
        for stage, channels in enumerate(WIDTHS):
            for block in range(BLOCKS_PER_STAGE):
                layers.append(BasicBlock(in_channels, channels, normalize_first=stage > 0 or block > 0))
                in_channels = channels
        layers += [group_norm(in_channels), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                   nn.Linear(in_channels, num_classes)]
        super().__init__(*layers)
