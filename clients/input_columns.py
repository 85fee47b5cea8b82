"""Local training cut to the input columns a user's examples use: exact for a linear input layer on sparse
features.

Tag prediction from posts (DOPE-SGD, Amid et al. 2022; AdaDPS, Li et al. 2023) feeds 10,000 bag-of-words
features to a ``Linear(10000, 500)``; a post uses a few dozen words. The gradient of that layer's weight is
``(dL/dlogits)ᵀ x``: zero in every column whose feature is zero in all of the minibatch's examples. A column
that every local gradient leaves at zero never moves under SGD, with momentum (its buffer stays zero), the prox
term λ‖w − w_start‖² (its gradient there is zero while the column is unchanged) and a preconditioner's elementwise
divide. So a user's local training equals training the model with that weight cut to the columns its examples
use, and its inputs cut alike, step for step: the other columns of its update are exactly zero.
:class:`InputColumns` makes the cut and returns the update as a :class:`~fedpub.column_update.ColumnUpdate`
(or as the whole tensor).

The cut applies to a model that is an ``nn.Sequential`` whose first layer is an ``nn.Linear`` reading the
examples' features directly, when the user's examples use at most half of its inputs (:func:`input_columns`);
a user's local steps then touch the weight in proportion to the words it wrote, not 5M parameters per step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from fedpub.column_update import ColumnUpdate, UpdateValue

MAX_COLUMN_FRACTION = 0.5
"""Cut when the user's examples use at most this fraction of the input layer's columns."""

INPUT_LAYER = "0."
"""The prefix of the parameter names of an ``nn.Sequential``'s first layer."""


@dataclass(frozen=True)
class InputColumns:
    """The columns (increasing, on the CPU) of the input weight ``weight`` that a user's examples use. The cut
    weight is held column by column, ``(columns, outputs)`` (:class:`~fedpub.column_update.ColumnUpdate`'s
    layout), so cutting it and adding it back read whole rows of memory."""

    weight: str
    columns: torch.Tensor

    def cut(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``tensors`` (parameters, or anything shaped like them) with the input weight cut to the columns."""
        return {
            name: value.movedim(-1, 0).index_select(0, self.columns.to(value.device)) if name == self.weight else value
            for name, value in tensors.items()
        }

    def trainable(self, model: nn.Sequential, start: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The tensors local SGD trains, named and ordered as the model's parameters, from ``start`` (cut by
        :meth:`cut`): the input layer's as new leaves (its weight cut), every later layer's the model's own
        parameters, set to ``start`` (the resident model's input layer is never touched)."""
        trainable = {}
        for name, parameter in model.named_parameters():
            if name.startswith(INPUT_LAYER):
                trainable[name] = start[name].clone().requires_grad_()
            else:
                with torch.no_grad():
                    parameter.copy_(start[name])
                trainable[name] = parameter
        return trainable

    def forward(self, model: nn.Sequential, trainable: Mapping[str, torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
        """The model's forward pass on cut inputs with ``trainable``'s input layer (what ``nn.Linear`` computes,
        with the cut weight viewed as ``(outputs, columns)``), then the model's later layers."""
        weight, bias, later = trainable[self.weight], trainable.get(INPUT_LAYER + "bias"), list(model)[1:]

        def forward(inputs: torch.Tensor) -> torch.Tensor:
            outputs = nn.functional.linear(inputs, weight.movedim(0, -1), bias)
            for layer in later:
                outputs = layer(outputs)
            return outputs

        return forward

    def cut_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """The examples' features in the columns."""
        return x.index_select(1, self.columns.to(x.device))

    def update(
        self, cut_delta: Mapping[str, torch.Tensor], like: Mapping[str, torch.Tensor], *, sparse: bool
    ) -> dict[str, UpdateValue]:
        """The whole-model update from the cut model's: the input weight as a :class:`ColumnUpdate` (``sparse``)
        or as a tensor shaped like ``like``'s, zero outside the columns."""
        update: dict[str, UpdateValue] = dict(cut_delta)
        columns = ColumnUpdate(self.columns, cut_delta[self.weight], like[self.weight].shape)
        update[self.weight] = columns if sparse else columns.to_dense()
        return update


def input_layer(model: nn.Module) -> nn.Linear | None:
    """The model's input ``nn.Linear`` when it is an ``nn.Sequential`` (its layers applied in turn: a subclass
    may not redefine ``forward``) that starts with one, else ``None``."""
    chained = isinstance(model, nn.Sequential) and type(model).forward is nn.Sequential.forward
    if chained and len(model) > 0 and isinstance(model[0], nn.Linear):
        return model[0]
    return None


def input_columns(model: nn.Module, x: torch.Tensor) -> InputColumns | None:
    """The cut for a user whose examples are ``x`` (``(examples, features)``), or ``None`` when the model has no
    input ``Linear`` over ``x``'s features or the examples use more than :data:`MAX_COLUMN_FRACTION` of them."""
    layer = input_layer(model)
    if layer is None or x.dim() != 2 or x.shape[1] != layer.in_features:
        return None
    columns = x.abs().sum(dim=0).nonzero().squeeze(1).cpu()  # NaN counts as used: it reaches the loss
    if len(columns) > MAX_COLUMN_FRACTION * layer.in_features:
        return None
    return InputColumns(INPUT_LAYER + "weight", columns)
