"""ONNX models on the float8, float4 and sub-byte integer types, and the bit operators, compiled
(ember.compile, the C path) and compared bit for bit with ONNX's reference evaluator on fresh
random data with the edge values: Cast and CastLike with and without saturation, float8_e8m0fnu's
rounding modes, Transpose/Reshape/Identity of the narrow types, QuantizeLinear and
DequantizeLinear, BitShift of signed integers, the Bitwise operators and BitCast; and torch
float8 tensors in and out of a compiled model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

import ember

RNG = np.random.default_rng()
TYPES = {"float8_e4m3fn": TP.FLOAT8E4M3FN, "float8_e4m3fnuz": TP.FLOAT8E4M3FNUZ, "float8_e5m2": TP.FLOAT8E5M2,
         "float8_e5m2fnuz": TP.FLOAT8E5M2FNUZ, "float8_e8m0fnu": TP.FLOAT8E8M0, "float4_e2m1fn": TP.FLOAT4E2M1,
         "int4": TP.INT4, "uint4": TP.UINT4, "int2": TP.INT2, "uint2": TP.UINT2}
SHAPE = (6, 40)


def _model(nodes, inputs, outputs, opset=25):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.view(f"uint{a.dtype.itemsize * 8}") if a.dtype.kind != "b" else a


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    compiled = ember.compile(model)
    got = compiled(*feeds.values())
    got = got if isinstance(got, tuple) else (got,)
    expected = ReferenceEvaluator(model).run(None, feeds)
    for out, a, e in zip(model.graph.output, got, expected):
        assert a.dtype == e.dtype and a.shape == e.shape, out.name
        np.testing.assert_array_equal(_bits(a), _bits(e), err_msg=out.name)


def _floats(dtype=np.float32) -> np.ndarray:
    x = RNG.standard_normal(SHAPE) * RNG.choice([1e-9, 1e-3, 1, 30, 1e3, 1e5, 1e9], SHAPE)
    x.flat[:12] = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, 448, 464, 57344, 61440, -1e6]
    with np.errstate(over="ignore"):  # (float16: past its range is inf, an edge value too)
        return x.astype(dtype)


@pytest.mark.parametrize("src", ["float32", "float16"])
def test_casts_to_and_from_every_narrow_type(src):
    vi = helper.make_tensor_value_info
    src_type = TP.FLOAT if src == "float32" else TP.FLOAT16
    nodes, outputs = [], []
    for name, t in TYPES.items():
        nodes += [helper.make_node("Cast", ["x"], [f"sat_{name}"], to=t),
                  helper.make_node("Cast", [f"sat_{name}"], [f"back_{name}"], to=src_type),
                  helper.make_node("Transpose", [f"sat_{name}"], [f"t_{name}"], perm=[1, 0]),
                  helper.make_node("Reshape", [f"t_{name}", "shape"], [f"r_{name}"]),
                  helper.make_node("Identity", [f"r_{name}"], [f"i_{name}"])]
        outputs += [vi(f"sat_{name}", t, SHAPE), vi(f"back_{name}", src_type, SHAPE),
                    vi(f"i_{name}", t, [SHAPE[0] * SHAPE[1]])]
        if name.startswith("float8") and name != "float8_e8m0fnu":
            nodes.append(helper.make_node("Cast", ["x"], [f"nosat_{name}"], to=t, saturate=0))
            outputs.append(vi(f"nosat_{name}", t, SHAPE))
    for mode in ("up", "down", "nearest"):
        for saturate in (0, 1):
            nodes.append(helper.make_node("Cast", ["x"], [f"e8m0_{mode}_{saturate}"], to=TP.FLOAT8E8M0,
                                          round_mode=mode, saturate=saturate))
            outputs.append(vi(f"e8m0_{mode}_{saturate}", TP.FLOAT8E8M0, SHAPE))
    shape = helper.make_tensor("shape", TP.INT64, [1], [-1])
    model = _model(nodes, [vi("x", src_type, SHAPE)], outputs)
    model.graph.initializer.append(shape)
    x = _floats(src)
    x.flat[12:16] = [2.0**127 * 1.5, 2.0**127, 3e38, -2.0**-130] if src == "float32" else [7.5, -8.5, 15, 16]
    _check(model, {"x": x})


def test_castlike_and_narrow_inputs():
    """Graph inputs of each type, cast to float32 and to another narrow type (CastLike)."""
    vi = helper.make_tensor_value_info
    nodes, inputs, outputs, feeds = [], [], [], {}
    for name, t in TYPES.items():
        inputs.append(vi(f"x_{name}", t, SHAPE))
        feeds[f"x_{name}"] = np.resize(np.arange(256 if name.startswith("float8") else 16, dtype=np.uint8),
                                       SHAPE).view(name) if name.startswith("float") else \
            RNG.integers(-8, 16, SHAPE).astype(name)
        nodes += [helper.make_node("Cast", [f"x_{name}"], [f"f_{name}"], to=TP.FLOAT),
                  helper.make_node("CastLike", [f"f_{name}", "like"], [f"l_{name}"])]
        outputs += [vi(f"f_{name}", TP.FLOAT, SHAPE), vi(f"l_{name}", TP.FLOAT8E5M2, SHAPE)]
    inputs.append(vi("like", TP.FLOAT8E5M2, [1]))
    feeds["like"] = np.zeros(1, "float8_e5m2")
    _check(_model(nodes, inputs, outputs), feeds)


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"])
def test_quantize_and_dequantize(name):
    vi = helper.make_tensor_value_info
    t = TYPES[name]
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], axis=1)]
    model = _model(nodes, [vi("x", TP.FLOAT, SHAPE), vi("scale", TP.FLOAT, [SHAPE[1]]), vi("zero", t, [SHAPE[1]])],
                   [vi("q", t, SHAPE), vi("y", TP.FLOAT, SHAPE)])
    zero = np.zeros(SHAPE[1], name) if name.startswith("float8") else \
        np.resize(np.arange(16, dtype=np.uint8), SHAPE[1]).view(name) if name.startswith("float") else \
        RNG.integers(0, 2, SHAPE[1]).astype(name)
    x = (RNG.standard_normal(SHAPE) * 20).astype(np.float32)
    _check(model, {"x": x, "scale": RNG.uniform(0.05, 2, SHAPE[1]).astype(np.float32), "zero": zero})


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint16"])
def test_bit_operators(dtype):
    vi = helper.make_tensor_value_info
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    width = np.iinfo(dtype).bits
    nodes = [helper.make_node("BitShift", ["x", "s"], ["left"], direction="LEFT"),
             helper.make_node("BitShift", ["x", "s"], ["right"], direction="RIGHT"),
             helper.make_node("BitwiseAnd", ["x", "y"], ["and"]), helper.make_node("BitwiseOr", ["x", "y"], ["or"]),
             helper.make_node("BitwiseXor", ["x", "y"], ["xor"]), helper.make_node("BitwiseNot", ["x"], ["not"])]
    outs = [vi(n, t, SHAPE) for n in ("left", "right", "and", "or", "xor", "not")]
    model = _model(nodes, [vi("x", t, SHAPE), vi("s", t, SHAPE), vi("y", t, [SHAPE[1]])], outs, opset=18)
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, SHAPE, endpoint=True, dtype=dtype)
    s = RNG.integers(-2 if info.min < 0 else 0, width + 3, SHAPE).astype(dtype)
    _check(model, {"x": x, "s": s, "y": RNG.integers(info.min, info.max, SHAPE[1], endpoint=True, dtype=dtype)})


@pytest.mark.parametrize("src, to", [("float32", TP.INT32), ("int64", TP.DOUBLE), ("float16", TP.UINT16),
                                     ("bool", TP.UINT8), ("float8_e4m3fn", TP.UINT8), ("int8", TP.UINT8)])
def test_bitcast(src, to):
    vi = helper.make_tensor_value_info
    s = helper.np_dtype_to_tensor_dtype(np.dtype(src))
    model = _model([helper.make_node("BitCast", ["x"], ["y"], to=to)], [vi("x", s, SHAPE)], [vi("y", to, SHAPE)],
                   opset=onnx.defs.onnx_opset_version())
    if src == "bool":
        x = RNG.random(SHAPE) < 0.5
    elif src == "float8_e4m3fn":
        x = np.resize(np.arange(256, dtype=np.uint8), SHAPE).view(src)
    elif src.startswith("float"):
        x = _floats(src)
        x[np.isnan(x)] = 1.5
    else:
        x = RNG.integers(np.iinfo(src).min, np.iinfo(src).max, SHAPE, endpoint=True, dtype=src)
        if to == TP.DOUBLE:
            x = x[np.isfinite(x.view(np.float64))].copy().reshape(-1)[:1].repeat(np.prod(SHAPE)).reshape(SHAPE)
    _check(model, {"x": x})


def test_torch_float8_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    vi = helper.make_tensor_value_info
    model = _model([helper.make_node("Cast", ["x"], ["f"], to=TP.FLOAT),
                    helper.make_node("Cast", ["f"], ["y"], to=TP.FLOAT8E5M2)],
                   [vi("x", TP.FLOAT8E4M3FN, SHAPE)], [vi("f", TP.FLOAT, SHAPE), vi("y", TP.FLOAT8E5M2, SHAPE)])
    x = torch.randn(SHAPE).to(torch.float8_e4m3fn)
    f, y = ember.compile(model)(x)
    assert f.dtype == torch.float32 and y.dtype == torch.float8_e5m2
    torch.testing.assert_close(f, x.float(), rtol=0, atol=0)
    assert torch.equal(y.view(torch.uint8), x.float().to(torch.float8_e5m2).view(torch.uint8))


def test_int4_weights_blocked_dequantize_and_artifact(tmp_path):
    """A weight-only quantized layer: int4 weights and zero points (packed two to a byte in the
    model), blocked DequantizeLinear, MatMul, a float8 bias, a float8 output; saved and loaded."""
    K, N, block = 64, 24, 16
    w = RNG.integers(-8, 8, (K, N)).astype("int4")
    zero = RNG.integers(-2, 2, (K // block, N)).astype("int4")
    scale = RNG.uniform(0.01, 0.1, (K // block, N)).astype(np.float32)
    bias = (RNG.standard_normal(N) * 10).astype("float8_e4m3fn")
    inits = [onnx.numpy_helper.from_array(a, n) for a, n in ((w, "w"), (scale, "scale"), (zero, "zero"), (bias, "b"))]
    nodes = [helper.make_node("DequantizeLinear", ["w", "scale", "zero"], ["wf"], axis=0, block_size=block),
             helper.make_node("MatMul", ["x", "wf"], ["y0"]), helper.make_node("Cast", ["b"], ["bf"], to=TP.FLOAT),
             helper.make_node("Add", ["y0", "bf"], ["y1"]), helper.make_node("Cast", ["y1"], ["y"], to=TP.FLOAT8E5M2)]
    vi = helper.make_tensor_value_info
    model = _model(nodes, [vi("x", TP.FLOAT, [3, K])], [vi("y", TP.FLOAT8E5M2, [3, N])], opset=21)
    model.graph.initializer.extend(inits)
    x = RNG.standard_normal((3, K)).astype(np.float32)
    _check(model, {"x": x})
    compiled = ember.compile(model)
    compiled.save(tmp_path / "model")
    np.testing.assert_array_equal(_bits(ember.load(tmp_path / "model")(x)), _bits(compiled(x)))
