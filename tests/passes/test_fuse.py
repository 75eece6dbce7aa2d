"""Operator fusion: which nodes group into one kernel (the textbook conv2d -> bias -> relu ->
batch_norm, no prologue into a convolution, elementwise chains, reduction prologues, diamonds
and residual adds, values read outside a chain), and fused compiles computing what the NumPy references compute."""

import numpy as np
import pytest

import ember
from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.fuse import FUSE_LEVEL, fuse, unfused
from ember.passes.plan_memory import VIEW_OPS
from ember.testing import random_array

RTOL = 1e-4  # fp32: a fused kernel computes in the same order, but conv/matmul sum in tiles
ATOL = 1e-4


def grouping(graph: Graph) -> list[list[str]]:
    return [list(g.ops) for g in fuse(graph).groups]


def conv_bias_relu_bn() -> Graph:
    """The textbook example: conv2d -> add(bias) -> relu -> batch_norm."""
    g = Graph("textbook")
    x = g.add_input("x", TensorType((1, 8, 12, 12)))
    w = g.add_constant(random_array((16, 8, 3, 3)), "w")
    b = g.add_constant(random_array((1, 16, 1, 1)), "b")
    (y,) = add_op(g, "conv2d", [x, w], {"padding": (1, 1, 1, 1)})
    (y,) = add_op(g, "add", [y, b])
    (y,) = add_op(g, "relu", [y])
    stats = [g.add_constant(random_array((16,)) + 1.5, name) for name in ("mean", "var", "gamma", "beta")]
    g.set_outputs(add_op(g, "batch_norm", [y, *stats]))
    return g


def residual_block() -> Graph:
    """relu(conv(relu(conv(x) + b)) + x): two convs, the second taking the residual add."""
    g = Graph("residual")
    x = g.add_input("x", TensorType((1, 8, 10, 10)))
    (y,) = add_op(g, "conv2d", [x, g.add_constant(random_array((8, 8, 3, 3)), "w1")], {"padding": (1, 1, 1, 1)})
    (y,) = add_op(g, "add", [y, g.add_constant(random_array((1, 8, 1, 1)), "b1")])
    (y,) = add_op(g, "relu", [y])
    (y,) = add_op(g, "conv2d", [y, g.add_constant(random_array((8, 8, 3, 3)), "w2")], {"padding": (1, 1, 1, 1)})
    (y,) = add_op(g, "add", [y, x])
    g.set_outputs(add_op(g, "relu", [y]))
    return g


def conv_prologue() -> Graph:
    """relu(conv1d(gelu(x))): the gelu stays a kernel of its own (a convolution reads each input
    element once per tap and output-channel block, an inlined gelu would be computed as often);
    the relu is the convolution's epilogue."""
    g = Graph("conv_prologue")
    x = g.add_input("x", TensorType((1, 4, 40)))
    (y,) = add_op(g, "gelu", [x])
    (y,) = add_op(g, "conv1d", [y, g.add_constant(random_array((8, 4, 3)), "w")], {"strides": (2,)})
    g.set_outputs(add_op(g, "relu", [y]))
    return g


def elementwise_chain() -> Graph:
    g = Graph("chain")
    x = g.add_input("x", TensorType((6, 32)))
    (y,) = add_op(g, "exp", [x])
    (y,) = add_op(g, "mul", [y, g.add_constant(random_array((32,)), "s")])
    (y,) = add_op(g, "transpose", [y], {"perm": (1, 0)})
    g.set_outputs(add_op(g, "tanh", [y]))
    return g


def diamond() -> Graph:
    """x -> exp -> (sigmoid, neg) -> add: the branches join, so all four fuse."""
    g = Graph("diamond")
    x = g.add_input("x", TensorType((4, 16)))
    (e,) = add_op(g, "exp", [x])
    (a,) = add_op(g, "sigmoid", [e])
    (b,) = add_op(g, "neg", [e])
    g.set_outputs(add_op(g, "add", [a, b]))
    return g


def reduction_prologue() -> Graph:
    """sum(exp(x) * s) then relu: the prologue joins the reduction; what follows it does not."""
    g = Graph("reduce")
    x = g.add_input("x", TensorType((8, 24)))
    (y,) = add_op(g, "exp", [x])
    (y,) = add_op(g, "mul", [y, g.add_constant(random_array((24,)), "s")])
    (y,) = add_op(g, "sum", [y], {"axes": (1,)})
    g.set_outputs(add_op(g, "relu", [y]))
    return g


def read_outside() -> Graph:
    """e = exp(x) is read by a chain and by a matmul: e is its group's output, and the matmul
    takes the add after it as its epilogue."""
    g = Graph("outside")
    x = g.add_input("x", TensorType((8, 16)))
    (e,) = add_op(g, "exp", [x])
    (a,) = add_op(g, "sigmoid", [e])
    (m,) = add_op(g, "matmul", [e, g.add_constant(random_array((16, 16)), "w")])
    g.set_outputs(add_op(g, "add", [m, a]))
    return g


def attention_scores() -> Graph:
    """softmax(q @ k^T * scale + mask): the matmul takes the scale and mask; softmax stays alone
    (a reduction does not take the epilogue of an anchor's group)."""
    g = Graph("scores")
    q = g.add_input("q", TensorType((2, 8, 16)))
    k = g.add_input("k", TensorType((2, 16, 8)))
    (s,) = add_op(g, "matmul", [q, k])
    (s,) = add_op(g, "mul", [s, g.add_constant(np.float32(0.25), "scale")])
    (s,) = add_op(g, "add", [s, g.add_constant(random_array((8,)), "mask")])
    g.set_outputs(add_op(g, "softmax", [s], {"axis": -1}))
    return g


def graph_output_in_chain() -> Graph:
    """t = tanh(x) is a graph output and read by the next node: t's node ends its group."""
    g = Graph("output")
    x = g.add_input("x", TensorType((4, 16)))
    (y,) = add_op(g, "exp", [x])
    (t,) = add_op(g, "tanh", [y])
    (u,) = add_op(g, "sigmoid", [t])
    g.set_outputs([t, u])
    return g


def linear_layer(*batch: int) -> Graph:
    """A linear layer on [*batch, 16, 32] as a 2-d gemm between reshapes, then a residual add and
    gelu. With batch 1 the reshapes only add and remove a dimension of size 1: the gemm takes
    them, the add and gelu as its epilogue. With batch 2 the reshape after the gemm splits its
    rows in two, which the gemm's tiles see through (row i is (i // 16, i % 16), and back
    (i // 16) * 16 + i % 16 = i): the same. Split in three (batch 2, 3), the nested divisions hide
    the tile: the reshape starts a group of its own. The reshape before the gemm stays a group of
    its own (an anchor takes no prologue): a view, no kernel."""
    g = Graph("linear")
    x = g.add_input("x", TensorType((*batch, 16, 32)))
    (a,) = add_op(g, "reshape", [x], {"shape": (int(np.prod(batch)) * 16, 32)})
    (y,) = add_op(g, "gemm", [a, g.add_constant(random_array((32, 32)), "w"), g.add_constant(random_array((32,)), "b")])
    (y,) = add_op(g, "reshape", [y], {"shape": (*batch, 16, 32)})
    (y,) = add_op(g, "add", [y, x])
    g.set_outputs(add_op(g, "gelu", [y]))
    return g


def residual_layer_norm(projected: bool) -> Graph:
    """layer_norm(x W + b + x) (a transformer's residual): the add goes into the gemm's epilogue, the
    layer norm is a kernel; unprojected, layer_norm(x + y + z) is one kernel, the adds its prologue."""
    g = Graph("residual_norm")
    x = g.add_input("x", TensorType((16, 32)))
    if projected:
        (y,) = add_op(g, "gemm", [x, g.add_constant(random_array((32, 32)), "w"),
                                  g.add_constant(random_array((32,)), "b")])
    else:
        (y,) = add_op(g, "add", [x, g.add_input("y", TensorType((16, 32)))])
    (y,) = add_op(g, "add", [y, x])
    g.set_outputs(add_op(g, "layer_norm", [y, g.add_constant(random_array((32,)), "gamma"),
                                           g.add_constant(random_array((32,)), "beta")]))
    return g


GRAPHS = {
    "textbook": (conv_bias_relu_bn, [["conv2d", "add", "relu", "batch_norm"]]),
    "residual": (residual_block, [["conv2d", "add", "relu"], ["conv2d", "add", "relu"]]),
    "conv_prologue": (conv_prologue, [["gelu"], ["conv1d", "relu"]]),
    "chain": (elementwise_chain, [["exp", "mul", "transpose", "tanh"]]),
    "diamond": (diamond, [["exp", "sigmoid", "neg", "add"]]),
    "reduction": (reduction_prologue, [["exp", "mul", "sum"], ["relu"]]),
    "outside": (read_outside, [["exp"], ["sigmoid", "matmul", "add"]]),
    "scores": (attention_scores, [["matmul", "mul", "add"], ["softmax"]]),
    "output": (graph_output_in_chain, [["exp", "tanh"], ["sigmoid"]]),
    "linear": (lambda: linear_layer(1), [["reshape"], ["gemm", "reshape", "add", "gelu"]]),
    "linear_rows_split": (lambda: linear_layer(2), [["reshape"], ["gemm", "reshape", "add", "gelu"]]),
    "linear_rows_split_twice": (lambda: linear_layer(2, 3), [["reshape"], ["gemm"], ["reshape", "add", "gelu"]]),
    "residual_norm": (lambda: residual_layer_norm(True), [["gemm", "add"], ["layer_norm"]]),
    "add_norm": (lambda: residual_layer_norm(False), [["add", "add", "layer_norm"]]),
}


@pytest.mark.parametrize("name", GRAPHS)
def test_grouping(name):
    make, want = GRAPHS[name]
    assert grouping(make()) == want


@pytest.mark.parametrize("name", GRAPHS)
def test_fused_compile_matches_references(name):
    g = GRAPHS[name][0]()
    cm = ember.compile(g, opt_level=FUSE_LEVEL)
    assert len(cm.kernels) == len([ops for ops in GRAPHS[name][1] if set(ops) - set(VIEW_OPS)])  # views: none
    inputs = [random_array(v.shape, v.dtype) for v in g.inputs]
    for k, (got, want) in enumerate(zip(cm(*inputs) if len(g.outputs) > 1 else [cm(*inputs)], evaluate(g, *inputs),
                                        strict=True)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"output {k}")


def test_textbook_example_is_one_kernel_whose_intermediates_stay_out_of_memory():
    g = conv_bias_relu_bn()
    cm = ember.compile(g, opt_level=FUSE_LEVEL)
    assert [k.ops for k in cm.kernels] == [("conv2d", "add", "relu", "batch_norm")]
    assert cm.plan.tensors == ()  # the one kernel writes the graph output; nothing in between


def test_group_inputs_and_outputs():
    (e_group, rest) = fuse(read_outside()).groups
    assert [v.name for v in e_group.outputs] == ["exp"] and e_group.anchor is None
    assert rest.anchor is not None and rest.anchor.op == "matmul"
    assert {v.name for v in rest.inputs} == {"exp", "w"} and [v.name for v in rest.outputs] == ["add"]


def test_fusion_is_switched_off_by_level_and_by_name(monkeypatch):
    g = elementwise_chain()
    assert len(ember.compile(g, opt_level=FUSE_LEVEL).kernels) == 1
    assert len(ember.compile(g, opt_level=FUSE_LEVEL - 1).kernels) == 4
    assert len(ember.compile(g, opt_level=FUSE_LEVEL, disabled_passes=["fuse"]).kernels) == 4
    monkeypatch.setenv("EMBER_DISABLE_PASSES", "fuse")
    assert len(ember.compile(g, opt_level=FUSE_LEVEL).kernels) == 4
    assert [list(gr.ops) for gr in unfused(g).groups] == [["exp"], ["mul"], ["transpose"], ["tanh"]]


def test_print_ir_shows_the_groups(capsys):
    ember.compile(diamond(), opt_level=FUSE_LEVEL, print_ir="fuse")
    err = capsys.readouterr().err
    assert "# after fuse (4 nodes -> 1 kernels)" in err
    assert "kernel 0: exp -> sigmoid -> neg -> add  (%x) -> %add" in err


def test_a_reduction_takes_the_cast_of_its_output_only_where_that_is_a_graph_output():
    # a half model's output cast back to float32 (ember.passes.half_precision) is stored by the
    # kernel that computes the value; a cast read further on leaves the reduction a kernel of its own
    g = Graph("output_cast")
    x = g.add_input("x", TensorType((2, 3, 16), "float16"))
    (y,) = add_op(g, "softmax", [x], {"axis": -1})
    (out,) = add_op(g, "cast", [y], {"dtype": "float32"})
    (z,) = add_op(g, "layer_norm", [x, g.add_constant(random_array((16,), "float16"), "w")])
    (wide,) = add_op(g, "cast", [z], {"dtype": "float32"})
    g.set_outputs([out, *add_op(g, "relu", [wide])])
    assert grouping(g) == [["softmax", "cast"], ["layer_norm"], ["cast", "relu"]]
    data = random_array((2, 3, 16), "float16")
    cm = ember.compile(g, target="python")
    for got, expected in zip(cm(data), evaluate(g, data)):
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)
