"""torch's symbolic sizes as ember dimensions (ember.frontend.torch.node.Builder.dim): polynomials
of the symbols, renamed after their torch.export.Dim, in canonical form; a floor division or a
modulo (no polynomial) refused with a FrontendError; a size used as a value (a comparison's operand,
full's value, clamp's bound) compiled, against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import Dim
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import ember
from ember.frontend.torch.node import Builder, FrontendError
from ember.graph.core import Graph


def test_polynomials_of_symbols():
    env = ShapeEnv()
    s, t = env.create_unbacked_symint(), env.create_unbacked_symint()
    b = Builder(Graph(), {str(s.node.expr): "past", str(t.node.expr): "seq"})
    assert b.dim(s + 1) == "past + 1"
    assert b.dim(2 * s * t + 3) == "2*past*seq + 3"
    assert b.dim(s * s - t) == "past*past - seq"
    assert b.dim(s - s + 4) == 4 and b.dim(7) == 7


@pytest.mark.parametrize("size", [lambda s: s // 2, lambda s: s % 3])
def test_other_sizes_are_refused(size):
    env = ShapeEnv()
    s = env.create_unbacked_symint()
    with pytest.raises(FrontendError, match="not a polynomial of symbols"):
        Builder(Graph()).dim(size(s))


@pytest.mark.parametrize("name", ["compare", "compare_expression", "full", "full_static", "clamp"])
def test_a_size_used_as_a_value(name):
    """A symbolic size (torch's SymInt) as an operand of a comparison and as the value of full:
    compiled once, against torch at several sizes. torch.arange(n) <= n - 2 (a mask of the
    positions before the last) raised AttributeError in the dtype promotion, torch.full((n,), n)
    ValueError (the value taken for a number), torch.clamp(i, max=n - 1) an OpTypeError."""
    fn = {"compare": lambda x, n: x * (torch.arange(n) <= n - 2),
          "compare_expression": lambda x, n: x * (torch.arange(n) > 2 * n - n - 3),
          "full": lambda x, n: x + torch.full((n,), n - 1),
          "full_static": lambda x, n: x.sum() + torch.full((3,), n, dtype=torch.float32),
          "clamp": lambda x, n: torch.clamp(torch.arange(n) * 3 - 4, min=1, max=n - 1) * x}[name]

    class Model(torch.nn.Module):
        def forward(self, x):
            return fn(x, x.shape[0])

    model = Model()
    compiled = ember.compile(model, (torch.randn(6),), dynamic_shapes=({0: Dim("n", min=3, max=64)},))
    for n in (3, 8, 17):
        x = torch.randn(n)
        want = model(x).numpy()
        got = np.asarray(compiled(x))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
