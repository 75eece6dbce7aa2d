"""Sizes as values (ember/ops/sizes.py: size, arange) and shape operators over dimension
expressions (concat to "past + 1", flatten to "12*b", slices from the end of a symbolic axis), each
kernel built once and run at several sizes, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from ember.compiler import compile_graph
from ember.graph.core import Graph, TensorType
from ember.ops import OpTypeError, infer_types
from ember.ops.nodes import add_op
from ember.testing import check_op_sizes

RNG = np.random.default_rng()
EXACT = {"rtol": 0, "atol": 0}


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def test_size_of_an_expression():
    types = [TensorType(("past", 3)), TensorType((2, "seq"))]
    attrs = {"dim": "2*seq + past + 1", "bind": (("past", 0, 0), ("seq", 1, 1))}
    outs = check_op_sizes("size", types, attrs, [[rand(p, 3), rand(2, s)] for p, s in [(1, 1), (4, 7), (30, 2)]],
                          **EXACT, targets=("c", "python"))
    assert [int(o[0]) for o in outs] == [4, 19, 35]


def test_size_needs_every_symbol_bound():
    with pytest.raises(OpTypeError, match="needs symbol"):
        infer_types("size", [TensorType(("past", 3))], {"dim": "past + seq", "bind": (("past", 0, 0),)})
    with pytest.raises(OpTypeError, match="not that dimension"):
        infer_types("size", [TensorType(("past", 3))], {"dim": "past", "bind": (("past", 0, 1),)})


@pytest.mark.parametrize("target", ["c", "python"])
def test_arange_and_size_in_a_model(target):
    """positions = arange(past + 1) + past, as a decode step's mask compares them."""
    g = Graph()
    x = g.add_input("x", TensorType(("past", 4)))
    (n,) = add_op(g, "size", [x], {"dim": "past", "bind": (("past", 0, 0),)})
    (r,) = add_op(g, "arange", [], {"length": "past + 1", "start": 3, "step": 2})
    (y,) = add_op(g, "add", [r, n])
    g.set_outputs([y])
    model = compile_graph(g, target=target)
    for past in (1, 6, 17):
        np.testing.assert_array_equal(model(rand(past, 4)), 3 + 2 * np.arange(past + 1) + past)


def test_concat_flatten_and_slices_over_expressions():
    types = [TensorType(("past", 3)), TensorType((1, 3))]
    _, (out,) = infer_types("concat", types, {"axis": 0})
    assert out.shape == ("past + 1", 3)
    check_op_sizes("concat", types, {"axis": 0}, [[rand(p, 3), rand(1, 3)] for p in (1, 5)], **EXACT)
    _, (out,) = infer_types("flatten", [TensorType(("b", 3, 4))], {"start_dim": 0})
    assert out.shape == ("12*b",)
    check_op_sizes("flatten", [TensorType(("b", 3, 4))], {"start_dim": 0}, [[rand(b, 3, 4)] for b in (1, 3)], **EXACT)
    for attrs, index in [({"starts": (-1,), "ends": (2**63 - 1,), "axes": (1,)}, np.s_[:, -1:]),
                         ({"starts": (2,), "ends": (2**63 - 1,), "axes": (1,)}, np.s_[:, 2:]),
                         ({"starts": (-4,), "ends": (-1,), "axes": (1,)}, np.s_[:, -4:-1]),
                         ({"starts": (1,), "ends": (3,), "axes": (1,)}, np.s_[:, 1:3])]:
        outs = check_op_sizes("slice", [TensorType((2, "seq"))], attrs, [[rand(2, s)] for s in (4, 9)], **EXACT)
        assert [o[0].shape for o in outs] == [rand(2, s)[index].shape for s in (4, 9)]
    # an end that is a dimension: the first seq of seq + 1
    _, (out,) = infer_types("slice", [TensorType((2, "seq + 1"))], {"starts": (0,), "ends": ("seq",), "axes": (1,)})
    assert out.shape == (2, "seq")
    with pytest.raises(OpTypeError, match="takes step 1 and bounds from one end each"):
        infer_types("slice", [TensorType(("seq",))], {"starts": (-3,), "ends": (2,)})


@pytest.mark.parametrize("target", ["c", "python"])
def test_a_static_table_sliced_up_to_a_symbol(target):
    """position_ids[:, :seq] of a table of 16 positions (BERT's over symbolic tokens): the bound is
    taken to lie within the table, as torch.export's range of seq asserts."""
    table = RNG.integers(0, 100, (1, 16)).astype("int64")
    g = Graph()
    x = g.add_input("x", TensorType((1, "seq"), "int64"))
    (rows,) = add_op(g, "slice", [g.add_constant(table, "table")], {"starts": (0,), "ends": ("seq",), "axes": (1,)})
    (y,) = add_op(g, "add", [x, rows])
    g.set_outputs([y])
    model = compile_graph(g, target=target)
    for seq in (1, 5, 16):
        ids = RNG.integers(0, 100, (1, seq)).astype("int64")
        np.testing.assert_array_equal(model(ids), ids + table[:, :seq])
    _, (out,) = infer_types("slice", [TensorType((1, 16))], {"starts": (3,), "ends": ("seq",), "axes": (1,)})
    assert out.shape == (1, "seq - 3")
    for bad in [{"starts": (-3,), "ends": ("seq",)}, {"starts": (0,), "ends": ("seq",), "steps": (2,)},
                {"starts": ("seq",), "ends": (16,)}]:
        with pytest.raises(OpTypeError, match="sliced with a symbolic bound"):
            infer_types("slice", [TensorType((16,))], {"axes": None, "steps": None} | bad)
