"""QDQ operators as QOperator nodes, before conversion, as ONNX Runtime fuses them (its QDQ
selectors), so that they run on ember's int8 kernels instead of widened floats. A node whose
operands are DequantizeLinear of quantized tensors and whose output feeds a QuantizeLinear becomes:

    Conv, MatMul (weights per tensor or per output channel, a Conv's bias DequantizeLinear of
        int32)                     -> QLinearConv, QLinearMatMul (converters/int8.py: qgemm)
    Gemm (alpha = beta = 1, no transA; its bias as a Conv's)
                                   -> com.microsoft QGemm (qgemm, converters/contrib_int8.py)
    Add (per-tensor scales)        -> com.microsoft QLinearAdd (NHWC, after the convolution that
                                      made its input: converters/contrib_int8.py)
    GlobalAveragePool              -> com.microsoft QLinearGlobalAveragePool (NHWC)
    MaxPool (one scale and zero point in and out)
                                   -> MaxPool of the quantized tensor (exact: quantization is
                                      monotone, and Q(DQ(q)) = q with the same scale)

The float nodes stay in the list for their other readers; what nothing reads is dropped as dead
code later.

A fused product computes in integers what the QDQ form computes in float32 (the bias in units of
x_scale * w_scale, the sum rescaled once): outputs agree with onnx's reference evaluator of the
QDQ model within one step of the output's quantization, and exactly where no float32 rounding
of the QDQ form falls on a rounding boundary. The others compute the QDQ form's own float32
arithmetic (QLinearAdd bit-exact; the average within a rounding of the sum's order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx


def _dequantized(node: onnx.NodeProto | None) -> bool:
    """A per-tensor or per-axis DequantizeLinear with its zero point given."""
    return (node is not None and node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx")
            and len(node.input) == 3 and all(node.input)
            and not any(a.name == "block_size" and a.i for a in node.attribute))


def _axis(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 1)


def fuse(nodes: Sequence[onnx.NodeProto], constants: Mapping[str, np.ndarray]) -> list[onnx.NodeProto]:
    """`nodes` with each QDQ Conv / MatMul ending in a QuantizeLinear replaced by its QOperator;
    `constants` (the initializers by name) show that the scales have the shapes the QOperator
    reads the same way."""
    producer = {out: node for node in nodes for out in node.output if out}
    return [_fused(node, producer, constants) or node for node in nodes]


def _fused(q: onnx.NodeProto, producer: dict[str, onnx.NodeProto],
           constants: Mapping[str, np.ndarray]) -> onnx.NodeProto | None:
    if q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx") or len(q.input) != 3 or not q.input[2]:
        return None
    node = producer.get(q.input[0])
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    operands = [producer.get(name) for name in node.input]
    if not operands or not all(_dequantized(d) for d in operands):
        return None
    fuse_as = {"Conv": _product, "MatMul": _product, "Gemm": _gemm, "Add": _add, "MaxPool": _max_pool,
               "GlobalAveragePool": _average}.get(node.op_type)
    return None if fuse_as is None else fuse_as(q, node, operands, constants)


def _per_tensor(d: onnx.NodeProto, constants: Mapping[str, np.ndarray]) -> bool:
    scale = constants.get(d.input[1])
    return scale is not None and scale.size == 1


def _bias_fits(bias: list[onnx.NodeProto], x_scale: np.ndarray, w_scale: np.ndarray,
               constants: Mapping[str, np.ndarray]) -> bool:
    """No bias, or an int32 one of zero point 0 in units of x_scale * w_scale (the QOperator's)."""
    if not bias:
        return True
    b_scale, b_zero = constants.get(bias[0].input[1]), constants.get(bias[0].input[2])
    return (b_scale is not None and b_zero is not None and not b_zero.any() and b_zero.dtype == np.int32
            and np.allclose(b_scale.astype(np.float64), x_scale.astype(np.float64) * w_scale, rtol=1e-6, atol=0))


def _product(q, product, operands, constants) -> onnx.NodeProto | None:
    if len(operands) < 2:
        return None
    (dx, dw, *bias) = operands
    x_scale, w_scale = constants.get(dx.input[1]), constants.get(dw.input[1])
    if x_scale is None or w_scale is None or x_scale.size != 1 or w_scale.ndim > 1:
        return None
    if w_scale.size > 1 and _axis(dw) not in ((0,) if product.op_type == "Conv" else (1, -1)):
        return None  # (scales along another axis than the output channels)
    if not _bias_fits(bias, x_scale, w_scale, constants):
        return None
    inputs = [*dx.input, *dw.input, *q.input[1:]]
    if product.op_type == "MatMul":
        return onnx.helper.make_node("QLinearMatMul", inputs, list(q.output), name=q.name or q.output[0])
    if bias:
        inputs.append(bias[0].input[0])
    node = onnx.helper.make_node("QLinearConv", inputs, list(q.output), name=q.name or q.output[0])
    node.attribute.extend(a for a in product.attribute)
    return node


def _gemm(q, gemm, operands, constants) -> onnx.NodeProto | None:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in gemm.attribute}
    if len(operands) < 2 or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 or attrs.get("transA"):
        return None
    (dx, dw, *bias) = operands
    x_scale, w_scale = constants.get(dx.input[1]), constants.get(dw.input[1])
    w, w_zero, x_zero = (constants.get(name) for name in (dw.input[0], dw.input[2], dx.input[2]))
    if w is None or w.dtype != np.int8 or w_zero is None or w_zero.any() or x_zero is None or x_zero.dtype != np.uint8:
        return None  # (QGemm runs on the int8 kernel only: constant symmetric int8 weights, uint8 activations)
    trans_b = int(attrs.get("transB", 0))
    if x_scale is None or w_scale is None or x_scale.size != 1 or w_scale.ndim > 1 or not (
            w_scale.size == 1 or _axis(dw) % 2 == (0 if trans_b else 1)) or not _bias_fits(
            bias, x_scale, w_scale, constants):
        return None
    inputs = [*dx.input, *dw.input, bias[0].input[0] if bias else "", *q.input[1:]]
    return onnx.helper.make_node("QGemm", inputs, list(q.output), name=q.name or q.output[0], domain="com.microsoft",
                                 transB=trans_b)


def _add(q, add, operands, constants) -> onnx.NodeProto | None:
    if len(operands) != 2 or not all(_per_tensor(d, constants) for d in [*operands, q]):
        return None
    (da, db) = operands
    return onnx.helper.make_node("QLinearAdd", [*da.input, *db.input, *q.input[1:]], list(q.output),
                                 name=q.name or q.output[0], domain="com.microsoft")


def _average(q, pool, operands, constants) -> onnx.NodeProto | None:
    if not all(_per_tensor(d, constants) for d in [*operands, q]):
        return None
    return onnx.helper.make_node("QLinearGlobalAveragePool", [*operands[0].input, *q.input[1:]], list(q.output),
                                 name=q.name or q.output[0], domain="com.microsoft", channels_last=0)


def _max_pool(q, pool, operands, constants) -> onnx.NodeProto | None:
    (d,) = operands
    same = [(constants.get(a), constants.get(b)) for a, b in zip(d.input[1:], q.input[1:])]
    if len(pool.output) != 1 or not all(a is not None and b is not None and a.size == 1 and a.dtype == b.dtype
                                        and a.reshape(()) == b.reshape(()) for a, b in same):
        return None
    if same[1][0].dtype not in (np.uint8, np.int8):
        return None  # (ONNX's MaxPool takes 8-bit integers only)
    node = onnx.helper.make_node("MaxPool", [d.input[0]], list(q.output), name=q.name or q.output[0])
    node.attribute.extend(a for a in pool.attribute)
    return node
