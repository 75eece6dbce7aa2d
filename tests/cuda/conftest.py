"""Fixtures of the CUDA model tests: the stand-in driver, and the models they compile once per
module (an MLP for target "cuda", and the same with a symbolic batch size)."""

import pytest
import torch
from model_cases import MODELS
from stand_in_driver import install

import ember

BATCH = torch.export.Dim("batch", min=1, max=8)


@pytest.fixture
def host_driver(monkeypatch):
    """The driver replaced by the stand-in (stand_in_driver.HostDriver) for the test."""
    return install(monkeypatch)


@pytest.fixture(scope="module")
def on_gpu():
    """(the model, compiled for target "cuda"): an MLP of two linear layers, batch 2."""
    torch.manual_seed(2)
    model = MODELS["mlp"][0]().eval()
    return model, ember.compile(model, (torch.randn(2, 16),), target="cuda")


@pytest.fixture(scope="module")
def symbolic_mlp():
    """(the model, compiled for target "cuda" with a symbolic batch size from 1 to 8)."""
    torch.manual_seed(3)
    model = MODELS["mlp"][0]().eval()
    return model, ember.compile(model, (torch.randn(2, 16),), dynamic_shapes=({0: BATCH},), target="cuda")
