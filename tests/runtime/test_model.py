"""Whole-model compilation and the CompiledModel runtime: results against NumPy, inputs checked
before native code runs, NumPy and torch in and out, symbolic sizes, kernel sharing, the build
cache, and calls from several threads at once."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch

import ember
from ember.compiler import compile_graph
from ember.errors import ArgumentTypeError, ShapeError
from ember.graph import Graph, TensorType
from ember.lowering import LOWERED
from ember.ops import UnsupportedOpError
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.fuse import FUSE_LEVEL
from ember.testing import random_array

RTOL, ATOL = 1e-6, 1e-6  # float32 elementwise arithmetic: C and NumPy round alike (FMA aside)


def residual_graph(n="n", c=16) -> tuple[Graph, object]:
    """out = max(x * w + b, x) + (x * w + b), and x * w, x, out again as more outputs;
    with its NumPy reference."""
    g = Graph("residual")
    x = g.add_input("x", TensorType((n, c)))
    b = g.add_input("b", TensorType((c,)))
    w = g.add_constant(random_array((c,)), "w")
    xw = add_op(g, "mul", [x, w])[0]
    h = add_op(g, "add", [xw, b])[0]
    out = add_op(g, "add", [add_op(g, "maximum", [h, x])[0], h])[0]
    g.set_outputs([out, xw, x, out])

    def reference(x, b):
        xw = x * g.constants["w"]
        h = xw + b
        out = np.maximum(h, x) + h
        return [out, xw, x, out]

    return g, reference


def check(outs, expected):
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected):
        np.testing.assert_allclose(np.asarray(o), e, rtol=RTOL, atol=ATOL)


def test_compile_matches_numpy_for_every_size():
    g, ref = residual_graph()
    cm = ember.compile(g)
    for n in (1, 7, 64):  # each size its own workspace layout
        x, b = random_array((n, 16)), random_array((16,))
        outs = cm(x, b)
        assert all(isinstance(o, np.ndarray) for o in outs)
        check(outs, ref(x, b))
    assert cm.graph is g and cm.spec.symbols == ("n",)
    assert [k.ops for k in cm.kernels] == [("mul",), ("add", "maximum", "add")]  # xw is an output: not fused
    unfused = compile_graph(residual_graph()[0], opt_level=FUSE_LEVEL - 1)
    assert [k.ops for k in unfused.kernels] == [("mul",), ("add",), ("maximum",), ("add",)]
    assert cm.source.count("ember_model_run(") == 1


def test_single_output_is_returned_as_is():
    g = Graph()
    x = g.add_input("x", TensorType((5,)))
    g.set_outputs(add_op(g, "sub", [x, g.add_constant(np.float32(2.0), "two")]))
    x_ = random_array((5,))
    np.testing.assert_allclose(compile_graph(g)(x_), x_ - 2, rtol=RTOL, atol=ATOL)


def test_operator_families_against_the_evaluator():
    """Normalization, transcendental, reduction, shape and multi-output operators in one model;
    an output of split that nothing reads still gets workspace memory."""
    g = Graph("mixed")
    x = g.add_input("x", TensorType(("n", 8, 16)))
    (h,) = add_op(g, "layer_norm", [x, g.add_constant(random_array((16,)), "gamma")])
    (h,) = add_op(g, "gelu", [h])
    (s,) = add_op(g, "softmax", [h], {"axis": -1})
    a, unused, b = add_op(g, "split", [s], {"axis": 2, "sizes": (4, 2, 10)})
    (t,) = add_op(g, "transpose", [a], {"perm": (0, 2, 1)})
    (r,) = add_op(g, "sum", [b], {"axes": (2,), "keepdims": True})
    (e,) = add_op(g, "exp", [add_op(g, "mul", [r, h])[0]])
    (m,) = add_op(g, "mean", [e], {"axes": (2,)})
    g.set_outputs([t, m, e])
    cm = compile_graph(g)
    assert cm.plan.tensors[cm.plan.index(unused.name)].last == 3  # written by node 3, read by none
    for n in (1, 3):
        x_ = random_array((n, 8, 16))
        for got, want in zip(cm(x_), evaluate(g, x_)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # exp, erf: a few ulp apart


def test_torch_in_torch_out():
    g, ref = residual_graph()
    cm = compile_graph(g)
    x = torch.rand(16, 3).T  # not contiguous: copied
    b = torch.rand(16)
    outs = cm(x, b)
    assert all(isinstance(o, torch.Tensor) for o in outs)
    check([o.numpy() for o in outs], ref(x.numpy(), b.numpy()))
    # contiguous inputs are passed without a copy
    x = torch.rand(4, 16, requires_grad=True)
    assert np.shares_memory(cm._as_array(0, x), x.detach().numpy())
    a = random_array((4, 16))
    assert cm._as_array(0, a) is a


@pytest.fixture
def model_no_native(monkeypatch):
    """The residual model, whose native entry point fails the test if anything reaches it."""
    cm = compile_graph(residual_graph()[0])

    def entry(*args):
        raise AssertionError("native code ran on invalid inputs")

    monkeypatch.setattr(cm, "_entry", entry)
    return cm


@pytest.mark.parametrize("inputs, error, message", [
    (lambda: [random_array((2, 16))], ArgumentTypeError, r"takes 2 input\(s\) \(x, b\), got 1"),
    (lambda: [random_array((2, 16), "float64"), random_array((16,))], ArgumentTypeError,
     "input 'x' has dtype float64, expected float32"),
    (lambda: [[1.0] * 16, random_array((16,))], ArgumentTypeError,
     r"input 1 \('x'\) must be a numpy.ndarray or a CPU torch.Tensor, got list"),
    (lambda: [random_array((2, 16)), torch.rand(16, dtype=torch.float64)], ArgumentTypeError,
     "input 'b' has dtype torch.float64, expected float32"),
    (lambda: [random_array((2, 16, 1)), random_array((16,))], ShapeError,
     r"input 'x' has 3 dimension\(s\), expected 2 \(shape \(n, 16\)\)"),
    (lambda: [random_array((2, 15)), random_array((16,))], ShapeError,
     r"input 'x' dimension 1: expected 16, got 15"),
    (lambda: [random_array((2, 16)), random_array((17,))], ShapeError,
     r"input 'b' dimension 0: expected 16, got 17"),
])
def test_inputs_checked_before_native_code(model_no_native, inputs, error, message):
    with pytest.raises(error, match=message):
        model_no_native(*inputs())


def test_symbols_must_agree_across_inputs():
    g = Graph()
    a, b = g.add_input("a", TensorType(("n", 4))), g.add_input("b", TensorType(("n", 4)))
    g.set_outputs([add_op(g, "add", [a, b])[0]])
    cm = compile_graph(g)
    with pytest.raises(ShapeError, match="input 'b' dimension 0 is 3, but input 'a' dimension 0 is 2 and both are 'n'"):
        cm(random_array((2, 4)), random_array((3, 4)))


def test_repeated_kernels_compile_once():
    """Identical nodes share one lowering; structurally equal kernels of different symbols share
    one kernel, each call passing its own sizes."""
    g = Graph()
    x, y = g.add_input("x", TensorType(("a", 8))), g.add_input("y", TensorType(("b", 8)))
    u, v = x, y
    for _ in range(3):
        u, v = add_op(g, "mul", [u, u])[0], add_op(g, "mul", [v, v])[0]
    g.set_outputs([u, v])
    cm = compile_graph(g)
    assert cm.stats.nodes == 6 and cm.stats.lowered == 2 and cm.stats.kernels == 1
    assert len(cm.kernels) == 1 and len(cm.kernels[0].nodes) == 6
    x_, y_ = random_array((3, 8)), random_array((5, 8))
    check(cm(x_, y_), [x_ ** 8, y_ ** 8])


def test_second_compile_hits_the_build_cache(monkeypatch):
    g, ref = residual_graph(4)
    first = compile_graph(g)
    assert not first.stats.cached

    def no_compiler(*args, **kwargs):
        raise AssertionError("the C compiler ran again")

    monkeypatch.setattr("ember.runtime.build._compile", no_compiler)
    again = compile_graph(g)
    assert again.stats.cached and again.source == first.source
    x, b = random_array((4, 16)), random_array((16,))
    check(again(x, b), ref(x, b))


def test_lowering_in_worker_processes_gives_the_same_model(monkeypatch):
    """By default a quick lowering stays in this process (a worker's start would cost more); one
    estimated to take PARALLEL_MIN_S goes on in workers, giving the same model."""
    g = Graph("chain")
    h = g.add_input("x", TensorType((4, 16)))
    for k in range(4):  # four matmuls of distinct shapes: four workloads
        h = add_op(g, "matmul", [h, g.add_constant(random_array((16 + k, 17 + k)), f"w{k}")])[0]
    g.set_outputs([h])
    monkeypatch.setenv("EMBER_LOWERED_CACHE", "0")
    LOWERED.clear()
    alone = compile_graph(g)
    assert alone.stats.jobs == 1 and alone.stats.lowered == 4
    data = random_array((4, 16))
    expected = data.astype(np.float64)
    for k in range(4):
        expected = expected @ g.constants[f"w{k}"]
    np.testing.assert_allclose(alone(data), expected, rtol=1e-4, atol=1e-4)
    if (os.cpu_count() or 1) > 1:
        monkeypatch.setattr("ember.lowering.PARALLEL_MIN_S", 0.0)
        LOWERED.clear()
        handed = compile_graph(g)
        assert handed.stats.jobs > 1 and handed.source == alone.source


def test_calls_from_several_threads():
    g, ref = residual_graph()
    cm = compile_graph(g, num_threads=1)
    errors = []

    def work(seed: int):
        rng = np.random.default_rng(seed)
        try:
            for k in range(20):
                n = 1 + (seed * 7 + k * 13) % 200  # sizes differ: different layouts at once
                x, b = random_array((n, 16), rng=rng), random_array((16,), rng=rng)
                check(cm(x, b), ref(x, b))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_unsupported_operators_listed_at_once():
    g = Graph()
    x = g.add_input("x", TensorType((2,)))
    y = g.add_node("frobnicate", [x], {}, [TensorType((2,))], name="f1").outputs[0]
    z = g.add_node("zorch", [y], {}, [TensorType((2,))], name="z1").outputs[0]
    g.set_outputs([z])
    with pytest.raises(UnsupportedOpError, match=r"2 unsupported operator\(s\): frobnicate, zorch") as e:
        compile_graph(g)
    assert e.value.missing == [("frobnicate", "f1"), ("zorch", "z1")]


def test_symbol_no_input_binds_is_refused():
    g = Graph()
    x = g.add_input("x", TensorType((4,)))
    y = g.add_node("add", [x, x], {}, [TensorType(("m",))], name="odd").outputs[0]
    g.set_outputs([y])
    with pytest.raises(ShapeError, match=r"%odd \(node odd: add\) has dimension\(s\) \['m'\] that no input has"):
        compile_graph(g)


def test_compile_onnx_model(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    w = random_array((4,))
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4], w)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(proto, tmp_path / "m.onnx")
    x = random_array((3, 4))
    for model in (proto, tmp_path / "m.onnx", str(tmp_path / "m.onnx")):
        np.testing.assert_allclose(ember.compile(model)(x), np.maximum(x + w, 0), rtol=RTOL, atol=ATOL)


def test_compile_refuses_other_objects():
    with pytest.raises(TypeError, match="ember.compile takes a Graph, a torch.nn.Module, or an ONNX model"):
        ember.compile(42)
    with pytest.raises(TypeError, match="needs example_inputs"):
        ember.compile(torch.nn.ReLU())
