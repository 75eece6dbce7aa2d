"""A cache read in place (ember/passes/fold_cache_append.py): an attention over concat(cache,
one new position) reads the two where they are (appended), on bshd and bhsd layouts, the folded
graph against the reference; two new positions stay concatenated."""

import numpy as np
from pass_check import ops

from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.dce import dce
from ember.passes.fold_cache_append import fold_cache_append

RNG = np.random.default_rng()


def _graph(layout="bshd", new=1):
    seq = 1 if layout == "bshd" else 2
    shape = lambda n: (1, n, 2, 8) if layout == "bshd" else (1, 2, n, 8)  # noqa: E731
    g = Graph()
    q = g.add_input("q", TensorType(shape(1)))
    k, v = g.add_input("k", TensorType(shape(5))), g.add_input("v", TensorType(shape(5)))
    kn, vn = g.add_input("kn", TensorType(shape(new))), g.add_input("vn", TensorType(shape(new)))
    kk, = add_op(g, "concat", [k, kn], {"axis": seq})
    vv, = add_op(g, "concat", [v, vn], {"axis": seq})
    out, = add_op(g, "scaled_dot_product_attention", [q, kk, vv], {"layout": layout})
    g.set_outputs([out])
    return g


def test_an_appended_position_is_read_in_place():
    for layout in ("bshd", "bhsd"):
        g = _graph(layout)
        out = dce(fold_cache_append(g))  # the concatenations, unread, go
        assert ops(out) == ["scaled_dot_product_attention"] and out.nodes[0].attrs["appended"]
        arrays = [RNG.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs]
        np.testing.assert_allclose(evaluate(out, *arrays)[0], evaluate(g, *arrays)[0], rtol=1e-5, atol=1e-6)


def test_two_new_positions_stay_concatenated():
    assert ops(dce(fold_cache_append(_graph(new=2)))).count("concat") == 2
