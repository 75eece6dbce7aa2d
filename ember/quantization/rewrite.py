"""The products of a float graph with constant weights as int8 products on qgemm
(ember/ops/quantized.py):

    conv2d(x, W, b)  ->  transpose(reshape(qgemm(im2col(NHWC(q(x))), Wq, -za * sums, sa * sw)), NCHW) + b
    gemm(a, W, c)    ->  qgemm(q(a), Wq, -za * sums, sa * sw) + c
    matmul(a, W)     ->  reshape(qgemm(q(reshape(a, (R, K))), Wq, ...), (..., N))

q(x) is x quantized to uint8 by its scale sa and zero point za (QuantizeLinear's arithmetic:
rint(x / sa) + za, clipped), from the range calibration gave it (static) or from its own minimum
and maximum at each run (dynamic: DynamicQuantizeLinear's arithmetic, as graph operators); each
activation is quantized once for every product that reads it. Wq are the weights in symmetric
int8, one scale per output channel (or one for all), packed at compile time; the zero point's
cost is folded into qgemm's int32 bias (computed at run time when the zero point is), and the
float32 epilogue rescales the int32 sums by sa * sw, so that what follows a product (its bias,
an activation, a residual add, the next product's quantization) fuses after it as before.

Left in float: products whose weights are not constants, grouped and 1-D or 3-D convolutions,
products of a transposed activation, and (dynamic) convolutions.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..graph.core import Graph, Node, Value
from ..ops.quantized import conv_weights, fold_weights
from ..passes.rewrite import Rewriter
from .calibrate import activation_params, weight_params


def products(graph: Graph, dynamic: bool = False) -> list[Node]:
    """The nodes `quantize_products` rewrites."""
    return [n for n in graph.nodes if _weights(graph, n, dynamic) is not None]


def _weights(graph: Graph, node: Node, dynamic: bool) -> np.ndarray | None:
    """The float (K, N) weights of a product the rewrite takes, else None."""
    if len(node.inputs) < 2 or not graph.is_constant(node.inputs[1]) or node.inputs[0].type.dtype != "float32" \
            or any(not isinstance(d, int) for d in node.inputs[0].type.shape):
        return None
    w = graph.constants[node.inputs[1].name]
    if w.dtype != np.float32:
        return None
    a = node.attrs
    if node.op == "conv2d" and not dynamic and a["groups"] == 1 and (len(node.inputs) == 2 or graph.is_constant(
            node.inputs[2])):
        return conv_weights(w)
    if node.op == "gemm" and not a["trans_a"] and not a["b_panels"] and a["alpha"] == 1 and w.ndim == 2 and (
            len(node.inputs) == 2 or graph.is_constant(node.inputs[2])):
        return w.T if a["trans_b"] else w
    if node.op == "matmul" and w.ndim == 2 and node.inputs[0].type.rank >= 2:
        return w
    return None


def quantize_products(graph: Graph, ranges: Mapping[str, tuple[float, float]] | None, per_channel: bool = True
                      ) -> Graph:
    """The graph with its products on qgemm: activations quantized by the ranges given per value
    name (calibration), or at run time where `ranges` is None (dynamic)."""
    rw = Rewriter(graph)
    quantized: dict[Value, tuple] = {}
    for node in graph.nodes:
        w = _weights(graph, node, ranges is None)
        if w is None:
            rw.copy(node, rw.inputs(node))
            continue
        x = node.inputs[0]
        if x not in quantized:
            quantized[x] = _quantize(rw, rw.value(x), None if ranges is None else ranges[x.name], f"{x.name}_int8")
        y = _product(rw, graph, node, w, quantized[x], per_channel)
        if not rw.replace(node, [y]):  # a graph output keeps its name
            (y,) = rw.emit("identity", [y], hint=node.name, out_names=[node.outputs[0].name])
            rw.replace(node, [y])
    return rw.finish()


def _quantize(rw: Rewriter, x: Value, bounds: tuple[float, float] | None, hint: str) -> tuple:
    """(uint8 x, its scale, its zero point): a float32 and an int for static ranges, values of the
    graph for dynamic ones (DynamicQuantizeLinear's arithmetic: uint8 over the range of x widened
    to hold 0)."""
    def op(name, inputs, attrs=None):
        return rw.emit(name, inputs, attrs, hint=f"{hint}_q")[0]

    def const(v):
        return rw.constant(np.asarray(v, np.float32), f"{hint}_q")

    if bounds is not None:
        scale, zero = activation_params(*bounds)
        s, z = const(scale), const(zero)
    else:
        low = op("minimum", [op("min", [x]), const(0)])
        high = op("maximum", [op("max", [x]), const(0)])
        span = op("sub", [high, low])
        span = op("where", [op("equal", [span, const(0)]), const(1), span])
        scale = s = op("div", [span, const(255)])
        zero = z = op("round", [op("clip", [op("neg", [op("div", [low, s])])], {"min": 0.0, "max": 255.0})])
    q = op("add", [op("round", [op("div", [x, s])]), z])
    return op("cast", [op("clip", [q], {"min": 0.0, "max": 255.0})], {"dtype": "uint8"}), scale, zero


def _product(rw: Rewriter, graph: Graph, node: Node, w: np.ndarray, quantized: tuple, per_channel: bool) -> Value:
    q, sa, za = quantized
    hint = f"{node.name}_int8"  # (the node's own name stays free for a graph output's identity)
    k, n = w.shape
    wq, sw = weight_params(w, per_channel)
    packed, bias0, sums = fold_weights(wq)
    padded = len(bias0)
    sw = np.pad(sw, (0, padded - n), constant_values=1.0)

    def op(name, inputs, attrs=None):
        return rw.emit(name, inputs, attrs, hint=hint)[0]

    if isinstance(za, int):  # static: the bias and the scale are constants
        bias, scale = rw.constant(bias0 - za * sums, f"{hint}_bias"), rw.constant((sa * sw).astype(np.float32))
    else:
        zi = op("cast", [za], {"dtype": "int32"})
        bias = op("sub", [rw.constant(bias0), op("mul", [zi, rw.constant(sums)])])
        scale = op("mul", [sa, rw.constant(sw)])
    x = node.inputs[0]
    shape = x.type.shape
    if node.op == "conv2d":
        a = node.attrs
        kernel = graph.constants[node.inputs[1].name].shape[2:]
        rows = op("im2col", [op("transpose", [q], {"perm": (0, 2, 3, 1)})], {
            "kernel": kernel, "strides": tuple(a["strides"]), "dilations": tuple(a["dilations"]),
            "pads": tuple(a["padding"]), "pad_value": za})
    else:
        rows = q if len(shape) == 2 else op("reshape", [q], {"shape": (int(np.prod(shape[:-1])), k)})
        if rows.type.shape[1] != packed.shape[1] * 4:
            rows = op("pad", [rows], {"pads": (0, 0, 0, packed.shape[1] * 4 - k)})
    y = op("qgemm", [rows, rw.constant(packed, f"{hint}_weights"), bias, scale], {"out_dtype": "float32"})
    if padded != n:
        y = op("slice", [y], {"starts": (0,), "ends": (n,), "axes": (1,)})
    out_shape = node.outputs[0].type.shape
    if node.op == "conv2d":
        y = op("transpose", [op("reshape", [y], {"shape": (out_shape[0], *out_shape[2:], n)})], {"perm": (0, 3, 1, 2)})
        if len(node.inputs) == 3:
            b = graph.constants[node.inputs[2].name]
            y = op("add", [y, rw.constant(b.reshape(1, n, 1, 1).astype(np.float32), f"{hint}_b")])
    elif node.op == "gemm":
        if len(node.inputs) == 3:
            c = graph.constants[node.inputs[2].name].astype(np.float32) * np.float32(node.attrs["beta"])
            y = op("add", [y, rw.constant(c, f"{hint}_c")])
    elif len(shape) != 2:
        y = op("reshape", [y], {"shape": out_shape})
    return y
