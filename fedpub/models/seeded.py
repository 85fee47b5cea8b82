"""An experiment's model with its seeded initial parameters, and a detached copy of a model's parameters.

Every backend starts from :func:`new_model` (the config's model, initialised from the generator of
(seed, ``"model_init"``)), so the same config gives the same initial model wherever it runs.
"""

from __future__ import annotations

import torch

from fedpub.config import ExperimentConfig
from fedpub.models import build_factory_model, build_model
from fedpub.seeding import torch_generator
from fedpub.types import Params


def new_model(config: ExperimentConfig, num_classes: int, device: torch.device) -> torch.nn.Module:
    """The config's model (a registered one of ``num_classes`` outputs, or ``model.factory``'s) with its seeded
    initial parameters (seed, "model_init"), on ``device``."""
    generator = torch_generator(config.seed, "model_init")
    if config.model.factory is not None:
        return build_factory_model(config.model.factory, config.model.kwargs, generator=generator).to(device)
    assert config.model.name is not None  # the config holds a name or a factory
    return build_model(config.model.name, num_classes, generator=generator).to(device)


def model_params(model: torch.nn.Module) -> Params:
    """A detached CPU copy of the model's parameters."""
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}
