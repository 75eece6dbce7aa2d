"""Constant folding at import (ember.frontend.fold), the one helper both frontends use: results as
the operator's NumPy reference gives them, in the dtypes type inference gives; folds that would
grow the constants left to run time; a result larger than memory a CompileError; symbolic
shapes through data movement; and, through each frontend, constant subgraphs computed by it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
from onnx_check import check_onnx, onnx_model, random_inputs
from torch_check import check_import

import ember.frontend.torch.importer as fx_importer
from ember.errors import CompileError
from ember.frontend.fold import GROWTH_LIMIT, array_type, fold
from ember.ops import get, infer_types


@pytest.fixture
def rng():
    return np.random.default_rng()


def test_fold_is_the_operators_reference(rng):
    a = rng.standard_normal((3, 4)).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    n = rng.integers(-50, 50, (3, 4)).astype("int32")
    cases = [("add", [a, b], None), ("softmax", [a], {"axis": -1}), ("cast", [a * 10], {"dtype": "int32"}),
             ("transpose", [a], {"perm": (1, 0)}), ("mul", [n, n], None), ("sum", [a], {"axes": (0,)})]
    for op, inputs, attrs in cases:
        bound, (t,) = infer_types(op, [array_type(x) for x in inputs], attrs)
        (out,) = fold(op, inputs, attrs, "test")
        (want,) = get(op).reference(inputs, bound)
        assert (out.dtype.name, out.shape) == (t.dtype, t.shape), op
        np.testing.assert_array_equal(out, np.asarray(want).astype(t.dtype), err_msg=op)


def test_fold_leaves_growing_constants_to_run_time(rng):
    x = rng.standard_normal(1).astype("float32")
    assert fold("expand", [x], {"shape": (2, GROWTH_LIMIT)}, "test") is None  # cheaper to compute than to store
    (small,) = fold("expand", [x], {"shape": (8, 8)}, "test")
    np.testing.assert_array_equal(small, np.full((8, 8), x[0]))


def test_fold_refuses_a_result_larger_than_memory():
    with pytest.raises(CompileError, match="node n: expand folded to a constant"):
        fold("expand", [np.ones(1, "float32")], {"shape": (1 << 30, 1 << 30)}, "node n")


def test_symbolic_shapes_fold_through_data_movement():
    shape = np.array(["batch", 3, 4], dtype=object)
    (first,) = fold("gather", [shape, np.array(0)], {"axis": 0}, "test")
    (rest,) = fold("slice", [shape], {"starts": (1,), "ends": (3,)}, "test")
    assert first.dtype == object and first.item() == "batch"
    assert rest.dtype == np.int64 and rest.tolist() == [3, 4]  # numbers again


def test_onnx_folds_constants_unless_they_grow(rng):
    text = """g (float[{0}, {1}] x) => (float y) {{
        big = Expand(one, shape)
        y = Add(x, big)
    }}"""
    for dims, ops in (((4, 8), ["add"]), ((300, 300), ["expand", "add"])):
        model = onnx_model(text.format(*dims), one=rng.standard_normal(1).astype("float32"), shape=np.array(dims))
        graph = check_onnx(model, random_inputs(model, rng), 1e-6, 1e-6)
        assert [n.op for n in graph.nodes] == ops, dims


def test_torch_folds_with_embers_references(monkeypatch):
    """A constant subgraph of ATen calls that have handlers is computed by ember's operators:
    torch never runs it."""
    class Folded(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.randn(4, 6))

        def forward(self, x):
            return x + torch.softmax(self.w * 3.0, dim=-1).sum(0) - self.w.to(torch.float64).mean().float()

    def no_torch(node, *_):
        raise AssertionError(f"torch computed {node.target}")

    monkeypatch.setattr(fx_importer, "_run_torch", no_torch)
    g = check_import(Folded(), torch.randn(2, 6), rtol=1e-5, atol=1e-5)
    assert g.op_histogram() == {"add": 1, "sub": 1}
