"""Model registry: ``build_model(name, num_classes)`` builds a freshly, deterministically initialised model.

Parameters are created on the meta device and then initialised with PyTorch's default schemes drawn from an
explicit ``torch.Generator`` (never the global RNG), so the same generator seed gives the same model.
``num_classes`` is the model's output size: classes for EMNIST, tags (500) for ``so_tag_logreg``, token ids
(10,004, also the input vocabulary) for ``so_nwp_lstm``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from fedpub.models.emnist import CnnDropout, Mlp, SmallCNN
from fedpub.models.stackoverflow import NextWordLstm, TagLogisticRegression

MODELS: dict[str, Callable[[int], nn.Module]] = {
    "emnist_small_cnn": SmallCNN,
    "emnist_cnn_dropout": CnnDropout,
    "emnist_mlp": Mlp,
    "so_tag_logreg": TagLogisticRegression,
    "so_nwp_lstm": NextWordLstm,
}


def init_parameters(model: nn.Module, generator: torch.Generator) -> None:
    """PyTorch's default init: Linear/Conv Kaiming-uniform weights and fan-in uniform biases; Embedding N(0, 1)
    with the padding row zero; LSTM every weight and bias U(-1/sqrt(hidden), 1/sqrt(hidden))."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            nn.init.kaiming_uniform_(module.weight, a=math.sqrt(5), generator=generator)
            if module.bias is not None:
                bound = 1.0 / math.sqrt(module.weight[0].numel())
                nn.init.uniform_(module.bias, -bound, bound, generator=generator)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, generator=generator)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LSTM):
            bound = 1.0 / math.sqrt(module.hidden_size)
            for parameter in module.parameters(recurse=False):
                nn.init.uniform_(parameter, -bound, bound, generator=generator)
        elif any(True for _ in module.parameters(recurse=False)):
            raise TypeError(f"init_parameters has no rule for {type(module).__name__}")


def build_model(name: str, num_classes: int, *, generator: torch.Generator | None = None) -> nn.Module:
    """Build model ``name`` with ``num_classes`` outputs, initialised from ``generator`` (default: seed 0)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(sorted(MODELS))}")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    with torch.device("meta"):
        model = MODELS[name](num_classes)
    model.to_empty(device="cpu")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        init_parameters(model, generator)
    return model


__all__ = ["MODELS", "build_model", "init_parameters"]
