import pytest
import torch

from fedpub.clients.device import default_device, resolve_device


def test_the_device_is_cuda_when_present_else_cpu():
    assert default_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_a_configured_device_resolves_to_what_it_names():
    assert resolve_device("auto") == default_device()
    assert resolve_device("cpu") == torch.device("cpu")
    if torch.cuda.is_available():
        assert resolve_device("cuda").type == "cuda"
    else:
        with pytest.raises(ValueError, match="device: cuda was asked for, but this machine has no cuda device"):
            resolve_device("cuda")
