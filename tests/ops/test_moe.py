"""histc and grouped_matmul (ember/ops/moe.py) on the C target against their NumPy references and
torch: histc over random floats (values outside the range, the range's ends) and over expert ids
as transformers' routers count them; grouped_matmul over tokens sorted by expert, an expert with
no tokens, rows past the last offset, in its register tile and without, its weights in place and
in panels (ember.passes.pack_experts packs constant ones); and the errors of bad attributes and
shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember.graph.core import Graph, TensorType
from ember.ops import OpTypeError, infer_types
from ember.ops.evaluate import evaluate
from ember.ops.moe import expert_panels
from ember.ops.nodes import add_op
from ember.passes.pack_weights import pack_weights
from ember.target import Target
from ember.testing import check_op

RNG = np.random.default_rng()
EXACT = {"rtol": 0, "atol": 0}


def test_histc_is_torch_histc():
    x = RNG.uniform(-3, 3, (5, 7)).astype("float32")
    x[0, :3] = [-2.0, 2.0, np.nan]  # the range's ends, and a NaN that is not counted
    check_op("histc", [x], {"bins": 6, "min": -2.0, "max": 2.0}, **EXACT,
             torch_fn=lambda t: torch.histc(torch.nan_to_num(t, nan=9.0), bins=6, min=-2.0, max=2.0))


def test_histc_counts_expert_ids():
    experts = 5
    ids = np.sort(RNG.integers(0, experts, 12)).astype("float32")
    check_op("histc", [ids], {"bins": experts, "min": 0, "max": experts - 1}, **EXACT,
             torch_fn=lambda t: torch.histc(t, bins=experts, min=0, max=experts - 1))


@pytest.mark.parametrize("counts, k, n, panels", [
    ((3, 0, 5, 2), 24, 10, 0),  # columns no vector divides: the default schedule
    ((9, 0, 17, 9), 40, 48, 0),  # the register tile, its tiles of rows across the experts' bounds, the last one short
    ((9, 0, 17, 9), 40, 48, 16),  # the same, the weights in panels: a tile one panel wide
])
def test_grouped_matmul_is_transformers_grouped_mm(counts, k, n, panels):
    experts = len(counts)  # an expert without tokens
    offsets = np.cumsum(counts).astype("int32")
    rows = offsets[-1] + 2
    x = RNG.standard_normal((rows, k)).astype("float32")  # 2 rows past the last offset: zero
    w = RNG.standard_normal((experts, k, n)).astype("float32")

    def torch_grouped(xt, wt, ot):
        out = torch.zeros(xt.shape[0], wt.shape[2])
        start = 0
        for e, end in enumerate(ot.tolist()):
            out[start:end] = xt[start:end] @ wt[e]
            start = end
        return out

    packed = np.ascontiguousarray(expert_panels(w, panels)) if panels else w
    (out,) = check_op("grouped_matmul", [x, packed, offsets], {"w_panels": panels}, rtol=1e-5, atol=1e-5,
                      torch_fn=lambda xt, _, ot: torch_grouped(xt, torch.from_numpy(w), ot))
    assert not out[offsets[-1]:].any()


def _experts_layer(rows) -> Graph:
    """x (rows, 128) through 3 constant experts of 128 x 512 (MIN_WEIGHTS elements each)."""
    g = Graph()
    x = g.add_input("x", TensorType((rows, 128)))
    w = g.add_constant(RNG.standard_normal((3, 128, 512)).astype("float32"), "w")
    y, = add_op(g, "grouped_matmul", [x, w, g.add_constant(np.array([5, 5, 11], "int64"), "offsets")])
    g.set_outputs([y])
    return g


def test_constant_experts_are_packed_in_panels():
    g = _experts_layer("m")  # any number of rows: packed, as matmul's weights are
    (node,) = pack_weights(g, Target(vector_bytes=64)).nodes
    assert node.attrs["w_panels"] == 32 and node.inputs[1].type.shape == (3, 16, 128, 32)
    (node,) = pack_weights(_experts_layer(1), Target(vector_bytes=64)).nodes  # one row streams w as it is
    assert node.attrs["w_panels"] == 0
    g = _experts_layer(13)
    x = RNG.standard_normal((13, 128)).astype("float32")
    np.testing.assert_allclose(evaluate(pack_weights(g), x)[0], evaluate(g, x)[0], rtol=1e-5, atol=1e-4)


def test_errors():
    with pytest.raises(OpTypeError, match=r"w in panels \(E, N / 16, K, 16\)"):
        infer_types("grouped_matmul", [TensorType((4, 8), "float32"), TensorType((2, 2, 8, 8), "float32"),
                                       TensorType((2,), "int32")], {"w_panels": 16})
    with pytest.raises(OpTypeError, match="min .* must be below max"):
        infer_types("histc", [TensorType((4,), "float32")], {"bins": 3, "min": 1.0, "max": 1.0})
    with pytest.raises(OpTypeError, match="floating-point"):
        infer_types("histc", [TensorType((4,), "int64")], {"bins": 3, "min": 0, "max": 2})
    with pytest.raises(OpTypeError, match="offsets must be integers"):
        infer_types("grouped_matmul", [TensorType((4, 8), "float32"), TensorType((2, 8, 3), "float32"),
                                       TensorType((2,), "float32")], {})
    with pytest.raises(OpTypeError, match="disagree"):
        infer_types("grouped_matmul", [TensorType((4, 8), "float32"), TensorType((2, 6, 3), "float32"),
                                       TensorType((2,), "int32")], {})
