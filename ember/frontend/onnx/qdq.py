"""QDQ products as QOperator nodes, before conversion: a Conv or MatMul whose operands are
DequantizeLinear of quantized tensors (its bias, for a Conv, DequantizeLinear of int32) and whose
output feeds a QuantizeLinear becomes one QLinearConv or QLinearMatMul on the quantized
tensors, as ONNX Runtime fuses them (its QDQ selectors), so that the product runs on ember's int8
kernel (converters/int8.py) instead of on widened floats. The float nodes stay in the list for
their other readers; what nothing reads is dropped as dead code later.

The fused node computes in integers what the QDQ form computes in float32 (the bias in units of
x_scale * w_scale, the sum rescaled once): outputs agree with onnx's reference evaluator of the
QDQ model within one step of the output's quantization, and exactly where no float32 rounding
of the QDQ form falls on a rounding boundary.
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
    product = producer.get(q.input[0])
    if product is None or product.op_type not in ("Conv", "MatMul") or product.domain not in ("", "ai.onnx"):
        return None
    operands = [producer.get(name) for name in product.input]
    if len(operands) < 2 or not all(_dequantized(d) for d in operands):
        return None
    (dx, dw, *bias) = operands
    x_scale, w_scale = constants.get(dx.input[1]), constants.get(dw.input[1])
    if x_scale is None or w_scale is None or x_scale.size != 1 or w_scale.ndim > 1:
        return None
    if w_scale.size > 1 and _axis(dw) not in ((0,) if product.op_type == "Conv" else (1, -1)):
        return None  # (scales along another axis than the output channels)
    if bias:
        b_scale, b_zero = constants.get(bias[0].input[1]), constants.get(bias[0].input[2])
        if b_scale is None or b_zero is None or b_zero.any() or b_zero.dtype != np.int32 or not np.allclose(
                b_scale.astype(np.float64), x_scale.astype(np.float64) * w_scale, rtol=1e-6, atol=0):
            return None  # the QOperator's bias is int32 in units of x_scale * w_scale
    inputs = [*dx.input, *dw.input, *q.input[1:]]
    if product.op_type == "MatMul":
        return onnx.helper.make_node("QLinearMatMul", inputs, list(q.output), name=q.name or q.output[0])
    if bias:
        inputs.append(bias[0].input[0])
    node = onnx.helper.make_node("QLinearConv", inputs, list(q.output), name=q.name or q.output[0])
    node.attribute.extend(a for a in product.attribute)
    return node
