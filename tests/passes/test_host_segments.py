"""host_segments: a graph cut around its host nodes (nonzero), and the compiled model that runs the
segments and the host steps in order (ember.runtime.segmented)."""

import numpy as np
import pytest

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.host_segments import has_host_nodes, host_segments


def _graph():
    """x -> relu -> nonzero -> cast -> sum; relu(x) also reaches the output past the host node, and
    one constant is used on both sides of it."""
    g = Graph("g")
    x = g.add_input("x", TensorType((3, 4), "float32"))
    c = g.add_constant(np.float32(0.5), "half")
    (r,) = add_op(g, "sub", [x, c], out_names=["r"])
    (r,) = add_op(g, "relu", [r], out_names=["relu"])
    (nz,) = add_op(g, "nonzero", [r], {"dim": "n"}, out_names=["nz"])
    (f,) = add_op(g, "cast", [nz], {"dtype": "float32"}, out_names=["f"])
    (s,) = add_op(g, "mul", [f, c], out_names=["s"])
    (m,) = add_op(g, "sum", [r], {"axes": (1,)}, out_names=["m"])
    g.set_outputs([s, m])
    return g


def test_steps():
    g = _graph()
    assert has_host_nodes(g)
    steps = host_segments(g)
    assert [(s.node is not None, s.inputs, s.outputs) for s in steps] == [
        (False, ("x",), ("relu",)), (True, ("relu",), ("nz",)), (False, ("nz", "relu"), ("s", "m"))]
    last = steps[2].graph
    assert [v.type for v in last.inputs] == [TensorType((2, "n"), "int64"), TensorType((3, 4), "float32")]
    assert "half" in last.constants and "half" in steps[0].graph.constants


@pytest.mark.parametrize("target", ["c", "python"])
def test_compiled(target):
    cm = ember.compile(_graph(), target=target)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.random((3, 4)).astype(np.float32)
        r = np.maximum(x - 0.5, 0)
        s, m = cm(x)
        np.testing.assert_array_equal(s, np.array(np.nonzero(r), np.float32) * 0.5)
        np.testing.assert_allclose(m, r.sum(axis=1), rtol=1e-6)
