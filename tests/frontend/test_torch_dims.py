"""torch's symbolic sizes as ember dimensions (ember.frontend.torch.node.Builder.dim): polynomials
of the symbols, renamed after their torch.export.Dim, in canonical form; a floor division or a
modulo (no polynomial) refused with a FrontendError."""

from __future__ import annotations

import pytest
from torch.fx.experimental.symbolic_shapes import ShapeEnv

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
