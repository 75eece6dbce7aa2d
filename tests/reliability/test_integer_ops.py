"""Integer operands, against onnx's reference evaluator and torch, compiled (target "c") and
interpreted (target "python"): every elementwise, binary, comparison, bitwise and reduction
operator of ONNX on each integer dtype it allows, and the mixed integer/float forms (Pow of an
integer base to a float exponent and back, Cast chains), over random values with 0, 1, -1 and the
type's extremes planted. One model per dtype holds every operator (one compile each), so the whole
file runs in well under a minute.

Integer Pow used to compute in float32 and store the float's bits into the integer output
([1, 2, 3] ** [4, 5, 6] gave [1065353216, ...]); an integer base to a float exponent was
computed with the exponent cast to an integer. Where ONNX leaves a result undefined (a negative
integer exponent: onnx's reference raises) ember's is torch's, checked against torch
(docs/operators.md); overflow wraps as NumPy's arrays do."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ember

SIGNED = ["int8", "int16", "int32", "int64"]
UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]
N = 61  # not a multiple of a vector: the tail runs too


def operands(dtype: str, rng: np.random.Generator, small: bool = False) -> np.ndarray:
    """Random values of the whole range (or small ones) with 0, 1, -1, min and max planted."""
    info = np.iinfo(dtype)
    lo, hi = (max(info.min, -9), min(info.max, 9)) if small else (info.min, info.max)
    x = rng.integers(lo, hi, N, dtype=dtype, endpoint=True)
    planted = [v for v in (0, 1, -1, 2, lo, hi, lo + 1) if lo <= v <= hi]
    x[rng.choice(N, len(planted), replace=False)] = planted
    return x


def _elem(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _nodes(dtype: str) -> list:
    """(op_type, inputs, attributes, output dtype) of every operator ONNX allows on `dtype`."""
    binary = ["Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "BitwiseAnd", "BitwiseOr", "BitwiseXor"]
    compare = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
    nodes = [(op, ("a", "b"), {}, dtype) for op in binary]
    nodes += [(op, ("a", "b"), {}, "bool") for op in compare]
    nodes += [("Mod", ("a", "b"), {"fmod": 1}, dtype), ("Abs", ("a",), {}, dtype), ("Sign", ("a",), {}, dtype),
              ("BitwiseNot", ("a",), {}, dtype), ("Where", ("c", "a", "b"), {}, dtype),
              ("Clip", ("a", "lo", "hi"), {}, dtype)]
    if dtype in SIGNED:
        nodes.append(("Neg", ("a",), {}, dtype))
    if dtype in UNSIGNED:
        nodes += [("BitShift", ("a", "s"), {"direction": d}, dtype) for d in ("LEFT", "RIGHT")]
    for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"):
        nodes.append((op, ("m", "axes"), {"keepdims": 0}, dtype))
    if dtype in ("int32", "int64", "uint32", "uint64"):  # (ONNX's types for these)
        nodes += [(op, ("m", "axes"), {"keepdims": 0}, dtype) for op in ("ReduceMean", "ReduceSumSquare", "ReduceL1")]
        nodes.append(("CumSum", ("a", "axis0"), {}, dtype))
    nodes += [(op, ("m",), {"axis": 1, "keepdims": 0}, "int64") for op in ("ArgMax", "ArgMin")]
    # Casts: to float64 (rounding 64-bit values), a wrapping one between integers, and through
    # a float that holds every value and back (CastBack)
    nodes += [("Cast", ("a",), {"to": TensorProto.DOUBLE}, "float64"),
              ("Cast", ("a",), {"to": TensorProto.INT8}, "int8")]
    if np.iinfo(dtype).bits <= 32:
        nodes.append(("CastBack", ("a",), {"to": _elem("float64" if np.iinfo(dtype).bits > 16 else "float32")}, dtype))
    return nodes


def _model(dtype: str):
    nodes, outputs = [], []
    for k, (op, ins, attrs, out) in enumerate(_nodes(dtype)):
        name = f"y{k}"
        if op == "CastBack":
            nodes.append(helper.make_node("Cast", list(ins), [name + "f"], **attrs))
            nodes.append(helper.make_node("Cast", [name + "f"], [name], to=_elem(dtype)))
        else:
            nodes.append(helper.make_node(op, list(ins), [name], **attrs))
        outputs.append(helper.make_tensor_value_info(name, _elem(out), [N]))
    inputs = [helper.make_tensor_value_info(n, _elem(dtype), [N]) for n in ("a", "b", "s", "lo", "hi")]
    inputs += [helper.make_tensor_value_info("c", TensorProto.BOOL, [N]),
               helper.make_tensor_value_info("m", _elem(dtype), [N, 5])]
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    axis0 = helper.make_tensor("axis0", TensorProto.INT64, [], [0])
    graph = helper.make_graph(nodes, "integer_ops", inputs, outputs, initializer=[axes, axis0])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _feeds(dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    bits = np.iinfo(dtype).bits
    lo, hi = np.sort(operands(dtype, rng, small=True)[:2])
    return {"a": operands(dtype, rng), "b": np.where(rng.random(N) < 0.5, operands(dtype, rng, small=True),
                                                     operands(dtype, rng)).astype(dtype),
            "s": rng.integers(0, bits, N).astype(dtype),  # a shift by the width or more is undefined in C
            "lo": np.full(N, lo, dtype), "hi": np.full(N, hi, dtype),
            "c": rng.random(N) < 0.5,
            "m": operands(dtype, rng, small=True)[rng.integers(0, N, (N, 5))]}  # (ties for ArgMax)


@pytest.mark.parametrize("target", ["c", "python"])
@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED)
def test_onnx_integer_operators_match_the_reference(dtype, target):
    rng = np.random.default_rng()
    model, feeds = _model(dtype), _feeds(dtype, rng)
    with np.errstate(all="ignore"):
        expected = ReferenceEvaluator(model).run(None, feeds)
    got = ember.compile(model, target=target)(*(feeds[i.name] for i in model.graph.input))
    for (op, _, attrs, _), want, out in zip(_nodes(dtype), expected, got):
        np.testing.assert_array_equal(np.asarray(out), want, err_msg=f"{op} {attrs} of {dtype} on {target}")


def _pow_model(base: str, exponent: str, out: str):
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    graph = helper.make_graph([node], "pow", [helper.make_tensor_value_info("x", _elem(base), [3]),
                                              helper.make_tensor_value_info("y", _elem(exponent), [3])],
                              [helper.make_tensor_value_info("z", _elem(out), [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


@pytest.mark.parametrize("target", ["c", "python"])
@pytest.mark.parametrize(("base", "exponent"), [("int32", "int32"), ("int64", "float32"), ("int64", "int64"),
                                                ("int32", "float32"), ("float32", "int64"), ("float32", "int32")])
def test_onnx_pow_of_mixed_types(base, exponent, target):
    """onnx's node cases test_pow_types_*, their data as graph inputs; and a float exponent that
    is no integer: 2 ** 2.5 is 5 (float64, then cast), not 2 ** 2."""
    model = _pow_model(base, exponent, base)
    compiled = ember.compile(model, target=target)
    second = ([2, -3, 7], [2.5, 3, 0.5]) if "float" in exponent else ([2, -3, 7], [3, 3, 0])
    for x, y in (([1, 2, 3], [4, 5, 6]), second):
        feeds = {"x": np.array(x, base), "y": np.array(y, exponent)}
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        got = compiled(feeds["x"], feeds["y"])
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"{base} ** {exponent} on {target}: {x} ** {y}")


class IntegerOps(torch.nn.Module):
    """torch's integer arithmetic, and its mixed forms with a float operand (type promotion)."""

    def forward(self, a, b, d, e, f):
        return (a + b, a - b, a * b, torch.pow(a, e), torch.bitwise_and(a, b), a | b, a ^ b, ~a, torch.abs(a),
                -a, torch.sign(a), torch.maximum(a, b), torch.minimum(a, b), a < b, a == b, a.sum(0), a.amax(0),
                a.amin(0), a.argmax(0), a + f, a * f, torch.pow(f, e), a.float() * 0.5, torch.where(a > b, a, b),
                a // d, a % d, torch.div(a, d, rounding_mode="trunc"), a / d, torch.clamp(a, -5, 5), a.prod(0),
                torch.cumsum(a, 0), a << e.abs(), a >> e.abs())  # (shifts past the width included)


@pytest.mark.parametrize(("dtype", "target"), [("int8", "c"), ("int32", "c"), ("int64", "c"), ("uint8", "c"),
                                               ("int8", "python"), ("int64", "python")])  # (an export each: 2 s)
def test_torch_integer_operators_match_torch(dtype, target):
    """Against eager torch, negative exponents included (torch: 0, but 1 for 1 and +-1 for -1)."""
    rng = np.random.default_rng()
    a, b = operands(dtype, rng), operands(dtype, rng)
    # divisors: torch raises on 0, and MIN // -1 traps in its kernels (ember's answers to both:
    # tests/reliability/test_integer_division.py)
    d = (rng.integers(2, 10, N) * (rng.choice([-1, 1], N) if dtype != "uint8" else 1)).astype(dtype)
    e = rng.integers(-3 if dtype != "uint8" else 0, 40, N).astype(dtype)
    f = rng.standard_normal(N).astype("float32")
    args = [torch.from_numpy(v) for v in (a, b, d, e, f)]
    expected = IntegerOps()(*args)
    got = ember.compile(IntegerOps(), tuple(args), target=target)(*args)
    for k, (want, out) in enumerate(zip(expected, got)):
        out = out.numpy() if isinstance(out, torch.Tensor) else np.asarray(out)
        if want.dtype.is_floating_point:
            np.testing.assert_allclose(out, want.numpy(), rtol=2e-6, atol=0, err_msg=f"output {k} of {dtype}")
        else:
            np.testing.assert_array_equal(out, want.numpy(), err_msg=f"output {k} of {dtype} on {target}")


def test_a_comparison_of_sums_that_wrap_is_not_simplified():
    """(x + c) > x and (x + c) <= (y + c) of int32 tensors where x + c wraps (two's complement,
    docs/operators.md), interpreted: the loop IR's simplifier took them for the comparisons of
    their linear forms (c > 0, True everywhere; x <= y), as it takes index arithmetic, which does
    not wrap. (The C target's are C's signed overflow, undefined: GCC folds them the same way.)"""
    from ember.graph import Graph, TensorType
    from ember.ops.nodes import add_op

    g = Graph("wraps")
    x, y = g.add_input("x", TensorType((N,), "int32")), g.add_input("y", TensorType((N,), "int32"))
    c, d = (g.add_constant(np.array(v, np.int32), name) for v, name in ((2**31 - 5, "c"), (2**31 - 7, "d")))
    (xc,) = add_op(g, "add", [x, c])  # (each sum read once: fused into its comparison's kernel)
    (xd,) = add_op(g, "add", [x, d])
    (yd,) = add_op(g, "add", [y, d])
    g.set_outputs([*add_op(g, "greater", [xc, x]), *add_op(g, "less_equal", [xd, yd])])
    rng = np.random.default_rng()
    xs, ys = rng.integers(-20, 20, N).astype(np.int32), rng.integers(-20, 20, N).astype(np.int32)
    greater, less_equal = ember.compile(g, target="python")(xs, ys)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(greater, xs + np.int32(2**31 - 5) > xs)
        np.testing.assert_array_equal(less_equal, xs + np.int32(2**31 - 7) <= ys + np.int32(2**31 - 7))
