"""bfloat16 through the torch frontend: weights, inputs and outputs of a small model, imported,
compiled, and called with torch tensors (their bits cross to NumPy's ml_dtypes.bfloat16),
against torch eager in bfloat16 at two bfloat16 ulps."""

from __future__ import annotations

import numpy as np
import torch

import ember
from ember.frontend.torch import import_module
from ember.testing import assert_close

BF16_RTOL = 2**-6


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 8).to(torch.bfloat16)

    def forward(self, x):
        h = torch.relu(self.linear(x))
        return h.sum(-1), torch.softmax(h.float(), -1).to(torch.bfloat16), (x * 2).to(torch.float32)


def test_bfloat16_model_against_eager():
    model = Block().eval()
    x = torch.randn(4, 16).to(torch.bfloat16)
    graph = import_module(model, (x,))
    assert graph.inputs[0].dtype == "bfloat16"
    with torch.no_grad():
        expected = model(x)
    compiled = ember.compile(graph)
    actual = compiled(x)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype, f"output {k}: {a.dtype} != {e.dtype}"
        assert_close(a.float().numpy(), e.float().numpy(), BF16_RTOL, 2e-2, f"output {k} vs torch eager")
    arrays = compiled(x.view(torch.int16).numpy().view(np.dtype("bfloat16")))
    assert arrays[0].dtype.name == "bfloat16"
