"""Building a model by name: ``build_model(name, num_classes)`` builds a freshly, deterministically initialised model;
``build_factory_model(ref, kwargs)`` builds a config's own (``model.factory``).

Models are declared by their datasets (:mod:`fedpub.data.registry`): the declaration names the class and the
normalisation layers it uses. Parameters are created on the meta device and then initialised with PyTorch's default
schemes drawn from an explicit ``torch.Generator`` (never the global RNG), so the same generator seed gives the same
model. ``num_classes`` is the model's output size (classes, tags, or token ids, as its dataset's task defines it).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Collection, Mapping
from typing import Any

import torch
from torch import nn

from fedpub.config import ConfigError
from fedpub.data import registry
from fedpub.data.spec import resolve

NORMALIZATION_LAYERS = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm, nn.LocalResponseNorm)
"""The layers a model uses only when its declaration lists them (:attr:`fedpub.data.spec.ModelDeclaration
.normalization`); those with affine parameters start from weight 1 and bias 0, as PyTorch resets them."""


def init_parameters(model: nn.Module, generator: torch.Generator, *, normalization: Collection[str] = ()) -> None:
    """PyTorch's default init: Linear/Conv Kaiming-uniform weights and fan-in uniform biases; Embedding N(0, 1)
    with the padding row zero; LSTM every weight and bias U(-1/sqrt(hidden), 1/sqrt(hidden)); a normalisation
    layer whose class is in ``normalization`` weight 1 and bias 0 (any other is refused)."""
    for name, module in model.named_modules():
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
        elif isinstance(module, NORMALIZATION_LAYERS):
            kind = type(module).__name__
            if kind not in normalization:
                declared = ", ".join(normalization) or "none"
                raise TypeError(
                    f"layer {name!r} is a {kind}, a normalisation layer the model's declaration does not list "
                    f"(ModelDeclaration.normalization: {declared})"
                )
            for parameter_name, parameter in module.named_parameters(recurse=False):
                (nn.init.ones_ if parameter_name == "weight" else nn.init.zeros_)(parameter)
        elif any(True for _ in module.parameters(recurse=False)):
            raise TypeError(f"init_parameters has no rule for {type(module).__name__}")


def build_model(name: str, num_classes: int, *, generator: torch.Generator | None = None) -> nn.Module:
    """Build model ``name`` with ``num_classes`` outputs, initialised from ``generator`` (default: seed 0)."""
    declaration = registry.model(name)
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    with torch.device("meta"):
        model = resolve(declaration.build)(num_classes)
    model.to_empty(device="cpu")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        init_parameters(model, generator, normalization=declaration.normalization)
    return model


def build_factory_model(
    ref: str, kwargs: Mapping[str, Any], *, generator: torch.Generator | None = None
) -> nn.Module:
    """The model ``model.factory`` ``ref`` builds from ``kwargs``, its parameters initialised as the factory
    initialises them, with torch's global RNG seeded from ``generator`` (default: seed 0) for the call and restored
    after. A model with running statistics (batch norm tracking them) is refused: they are state no aggregation
    averages, computed from private examples outside DP. ``kwargs`` the factory's signature does not take (an
    unknown name, a required one missing) and a factory returning no module are refused naming the field
    (:class:`~fedpub.config.ConfigError`)."""
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    factory = resolve(ref)
    _check_factory_kwargs(ref, factory, kwargs)
    seed = int(torch.randint(2**62, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model.factory {ref!r} returned a {type(model).__name__}, not a torch.nn.Module: make it "
                          "return the model")
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats:
            raise ValueError(
                f"model.factory {ref!r}: layer {name!r} ({type(module).__name__}) keeps running statistics, state "
                "that no aggregation averages and that private examples would set outside DP; use GroupNorm or "
                "LayerNorm, or track_running_stats=False"
            )
    return model


def _check_factory_kwargs(ref: str, factory: Any, kwargs: Mapping[str, Any]) -> None:
    """Refuse, naming ``model.kwargs``, keyword arguments that ``factory``'s signature cannot bind (an unknown name,
    a required argument missing), before it is called; a callable without a readable signature is called as is."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # some builtins and extension types have none
        return
    try:
        signature.bind(**kwargs)
    except TypeError as error:
        parameters = signature.parameters.values()
        open_ended = any(p.kind is p.VAR_KEYWORD for p in parameters)
        named = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = [] if open_ended else sorted(set(kwargs) - set(named))
        missing = [p.name for p in parameters if p.kind is not p.VAR_POSITIONAL and p.kind is not p.VAR_KEYWORD
                   and p.default is p.empty and p.name not in kwargs]
        problems = []
        if unknown:
            problems.append(f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not among its arguments")
        if missing:
            problems.append(f"it needs {', '.join(missing)}")
        if not problems:  # e.g. a positional-only argument, which no keyword can give
            problems.append(str(error))
        raise ConfigError(f"model.kwargs do not fit model.factory {ref!r}: {'; '.join(problems)} (it takes: "
                          f"{', '.join(named) or 'no keyword arguments'})") from None


__all__ = ["NORMALIZATION_LAYERS", "build_factory_model", "build_model", "init_parameters"]
