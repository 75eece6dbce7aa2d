"""ONNX's quantized operators on ember's int8 kernel (qgemm, converters/int8.py), compiled for
the C target and checked bit-exact against onnx's reference evaluator: QLinearConv (per-channel
scales, a bias, stride and padding; a depthwise one on qdepthwise, a grouped one a qgemm a
group), ConvInteger,
DynamicQuantizeLinear into MatMulInteger (the zero point known at run time only), QLinearMatMul
to int8; and a QDQ model (qdq.py: its Conv and MatMul fused into QOperators) within one step of
the output's quantization."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_graphs import model as _model
from onnx_graphs import value_info as _vi

import ember
from ember.frontend.onnx import import_onnx
from ember.passes.dce import dce

RNG = np.random.default_rng()


def _qoperators() -> onnx.ModelProto:
    f = lambda *s: RNG.uniform(0.005, 0.05, s).astype(np.float32)  # noqa: E731
    inits = {
        "xs": np.float32(0.02), "xz": np.uint8(11), "w": RNG.integers(-128, 128, (20, 3, 3, 3), dtype=np.int8),
        "ws": f(20), "wz": np.zeros(20, np.int8), "ys": np.float32(0.9), "yz": np.uint8(100),
        "b": RNG.integers(-3000, 3000, 20, dtype=np.int32),
        "w2": RNG.integers(-128, 128, (4, 3, 1, 1), dtype=np.int8), "xz2": np.uint8(9),
        "m": RNG.integers(-128, 128, (24, 40), dtype=np.int8),
        "as": np.float32(0.03), "az": np.uint8(120), "ms": f(40), "mz": np.zeros(40, np.int8),
        "os": np.float32(0.7), "oz": np.int8(-5),
        "dw": RNG.integers(-127, 128, (16, 1, 3, 3), dtype=np.int8), "dws": f(16), "dwz": np.zeros(16, np.int8),
        "db": RNG.integers(-3000, 3000, 16, dtype=np.int32), "dz": np.uint8(7), "ds": np.float32(0.4),
        "gw": RNG.integers(-128, 128, (6, 4, 3, 3), dtype=np.int8), "gws": f(6), "gwz": np.zeros(6, np.int8),
        "gb": RNG.integers(-3000, 3000, 6, dtype=np.int32),
    }
    nodes = [
        helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y1"],
                         kernel_shape=[3, 3], pads=[1, 0, 1, 2], strides=[2, 1]),
        helper.make_node("ConvInteger", ["x", "w2", "xz2"], ["y2"], kernel_shape=[1, 1]),
        helper.make_node("DynamicQuantizeLinear", ["f"], ["fq", "fs", "fz"]),
        helper.make_node("MatMulInteger", ["fq", "m", "fz"], ["y3"]),
        helper.make_node("QLinearMatMul", ["a", "as", "az", "m", "ms", "mz", "os", "oz"], ["y4"]),
        helper.make_node("QLinearConv", ["d", "xs", "dz", "dw", "dws", "dwz", "ds", "yz", "db"], ["y5"],
                         kernel_shape=[3, 3], pads=[1, 1, 0, 1], strides=[2, 1], group=16),  # depthwise
        helper.make_node("QLinearConv", ["g", "xs", "dz", "gw", "gws", "gwz", "ds", "yz", "gb"], ["y6"],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=2),  # two groups of 4 channels
    ]
    inputs = [_vi("x", TensorProto.UINT8, [1, 3, 9, 7]), _vi("f", TensorProto.FLOAT, [2, 5, 24]),
              _vi("a", TensorProto.UINT8, [6, 24]), _vi("d", TensorProto.UINT8, [1, 16, 7, 8]),
              _vi("g", TensorProto.UINT8, [1, 8, 5, 6])]
    outputs = [_vi(n, e) for n, e in [("y1", TensorProto.UINT8), ("y2", TensorProto.INT32),
                                      ("y3", TensorProto.INT32), ("y4", TensorProto.INT8),
                                      ("y5", TensorProto.UINT8), ("y6", TensorProto.UINT8)]]
    return _model(nodes, inputs, outputs, inits)


@pytest.fixture(scope="module")
def qoperators():
    model = _qoperators()
    return model, ember.compile(model)


def test_qoperators_run_on_the_int8_kernel(qoperators):
    model, _ = qoperators
    ops = [n.op for n in import_onnx(model).nodes]
    assert ops.count("qgemm") == 6 and ops.count("qdepthwise") == 1 and "conv2d" not in ops and "matmul" not in ops


def test_qoperators_bit_exact(qoperators):
    model, compiled = qoperators
    for _ in range(2):
        x = RNG.integers(0, 256, (1, 3, 9, 7), dtype=np.uint8)
        f = RNG.uniform(-3, 5, (2, 5, 24)).astype(np.float32)
        a = RNG.integers(0, 256, (6, 24), dtype=np.uint8)
        d = RNG.integers(0, 256, (1, 16, 7, 8), dtype=np.uint8)
        g = RNG.integers(0, 256, (1, 8, 5, 6), dtype=np.uint8)
        expected = ReferenceEvaluator(model).run(None, {"x": x, "f": f, "a": a, "d": d, "g": g})
        for name, got, want in zip(["y1", "y2", "y3", "y4", "y5", "y6"], compiled(x, f, a, d, g), expected):
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_qlinearconv_gathers_its_patches():
    """QLinearConv's patches read from its NHWC input by the product's kernel (qconv, no im2col in
    memory): a first layer's 7x7 of stride 2 over 3 channels, and a dilated 3x3 over 10 channels
    (no whole K-group), the padding read as the zero point; bit-exact against onnx's reference."""
    f = lambda *s: RNG.uniform(0.001, 0.01, s).astype(np.float32)  # noqa: E731
    inits = {"xs": np.float32(0.02), "xz": np.uint8(13), "w": RNG.integers(-128, 128, (16, 3, 7, 7), dtype=np.int8),
             "ws": f(16), "wz": np.zeros(16, np.int8), "ys": np.float32(0.5), "yz": np.uint8(90),
             "b": RNG.integers(-3000, 3000, 16, dtype=np.int32),
             "v": RNG.integers(-128, 128, (24, 10, 3, 3), dtype=np.int8), "vs": f(24), "vz": np.zeros(24, np.int8)}
    nodes = [
        helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y1"],
                         kernel_shape=[7, 7], pads=[3, 3, 3, 3], strides=[2, 2]),
        helper.make_node("QLinearConv", ["u", "xs", "xz", "v", "vs", "vz", "ys", "yz"], ["y2"],
                         kernel_shape=[3, 3], pads=[2, 1, 2, 1], dilations=[2, 1]),
    ]
    model = _model(nodes, [_vi("x", TensorProto.UINT8, [1, 3, 15, 14]), _vi("u", TensorProto.UINT8, [2, 10, 6, 5])],
                   [_vi("y1", TensorProto.UINT8), _vi("y2", TensorProto.UINT8)], inits)
    compiled = ember.compile(model)
    ops = [n.op for n in compiled.graph.nodes]
    assert ops.count("qconv") == 2 and "im2col" not in ops and "qgemm" not in ops
    x = RNG.integers(0, 256, (1, 3, 15, 14), dtype=np.uint8)
    u = RNG.integers(0, 256, (2, 10, 6, 5), dtype=np.uint8)
    for got, want in zip(compiled(x, u), ReferenceEvaluator(model).run(None, {"x": x, "u": u})):
        np.testing.assert_array_equal(got, want)


def test_qdq_products_fuse_into_qoperators():
    """x -> Q -> DQ -> Conv(DQ(w), DQ(b)) -> Q -> DQ -> MatMul(DQ(m)) -> Q -> DQ, weights per
    output channel, as ONNX Runtime's quantize_static writes a model."""
    xs, ws, ys, ms, os_ = np.float32(0.03), RNG.uniform(0.002, 0.01, 8).astype(np.float32), np.float32(0.1), \
        RNG.uniform(0.002, 0.01, 16).astype(np.float32), np.float32(0.2)
    inits = {"xs": xs, "xz": np.uint8(128), "w": RNG.integers(-127, 128, (8, 4, 3, 3), dtype=np.int8), "ws": ws,
             "wz": np.zeros(8, np.int8), "b": RNG.integers(-2000, 2000, 8, dtype=np.int32), "bs": xs * ws,
             "bz": np.zeros(8, np.int32), "ys": ys, "yz": np.uint8(60),
             "m": RNG.integers(-127, 128, (6, 16), dtype=np.int8), "ms": ms, "mz": np.zeros(16, np.int8),
             "os": os_, "oz": np.uint8(128)}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["cd"]),
        helper.make_node("DequantizeLinear", ["m", "ms", "mz"], ["md"], axis=1),
        helper.make_node("MatMul", ["cd", "md"], ["p"]),
        helper.make_node("QuantizeLinear", ["p", "os", "oz"], ["pq"]),
        helper.make_node("DequantizeLinear", ["pq", "os", "oz"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [1, 4, 5, 6])], [_vi("y", TensorProto.FLOAT)], inits)
    ops = [n.op for n in dce(import_onnx(model)).nodes]  # (the float products, read by nothing now)
    assert ops.count("qgemm") == 2 and "conv2d" not in ops and "matmul" not in ops
    compiled = ember.compile(model)
    x = RNG.uniform(-3, 3, (1, 4, 5, 6)).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = compiled(x)
    steps = np.abs(got - expected) / os_
    assert steps.max() <= 1.001 and (steps > 0.5).mean() < 0.05, steps.max()
