"""The products of a float graph with constant weights as int8 products on qgemm
(ember/ops/quantized.py):

    conv2d(x, W, b)  ->  qgemm(im2col(q(x) as NHWC), Wq, -za * sums, sa * sw) + b, in NHWC rows
    gemm(a, W, c)    ->  qgemm(q(a), Wq, -za * sums, sa * sw) + c
    matmul(a, W)     ->  reshape(qgemm(q(reshape(a, (R, K))), Wq, ...), (..., N))

q(x) is x quantized to uint8 by its scale sa and zero point za (QuantizeLinear's arithmetic,
rint(x / sa) + za, clipped, with x * (1 / sa) for a static sa: a division in every epilogue costs
more than it rounds better), from the range calibration gave it (static) or at each run (dynamic).
Dynamic, a linear layer's input of static sizes and whole blocks of 32 columns is quantized a row at
a time, by quantize_rows (ember.ops.gemm_nbits: max |row| / 127, offset 128), in a kernel of its
own: the zero point is a constant, folded into qgemm's bias at compile time, and the epilogue
multiplies by each row's scale; the per-tensor form (DynamicQuantizeLinear's arithmetic, as graph
operators) put a minimum, a maximum and the scale's and zero point's scalar arithmetic into every
product's epilogue, which recomputed them per vector (BERT-base's 768 -> 3072 product and GELU, 128
tokens: 1343 us per tensor, 1100 by rows; the model 43.6 -> 39.4 ms, one thread of an AMD EPYC Zen
5, CPU time, on qgemm's earlier 4 x 4 tile). Other dynamic activations keep that form (one scale:
a NaN or an infinity anywhere in the activation makes every row of the product NaN). Each
activation is quantized once for every product that reads it. Wq are the weights in symmetric int8,
one scale per output channel (or one for all), packed at compile time; the zero point's cost is
folded into qgemm's int32 bias (computed at run time when the zero point is), and the float32
epilogue rescales the int32 sums by sa * sw.

A convolution's output stays in qgemm's layout, NHWC rows (N * H * W, C), and so does what
follows it elementwise (its bias, an activation, a residual add; per-channel constants become rows
of C): the fuser then joins all of it, and the next product's quantization, to the product's
kernel, which writes the uint8 rows the next convolution reads (through im2col, or as they are
for a 1x1 convolution of stride 1). A residual add reads the other branch as its uint8 rows
dequantized where that branch is itself quantized for a product (QLinearAdd's arithmetic), so
that no float activation between convolutions reaches memory. A max pool of such rows that a
product reads pools the uint8 rows (max_pool2d_nchwc with one block of all C channels: NHWC),
quantized by the pool's output range: quantization is monotone, so that is exact. Every such
value also has its NCHW form (a transpose), for the operators that read it otherwise; what
nothing reads is dropped with the rest of the dead code.

A depthwise convolution whose channels fill panels of 16 runs on qdepthwise (ember/ops/qdepthwise.py),
its taps quantized as a product's weights, its output NHWC rows like a convolution's.

A grouped convolution (more than one channel a group) is an im2col and a qgemm per group, over its
slice of the NHWC channels, the groups' float32 rows concatenated.

Left in float: products whose weights are not constants, depthwise convolutions of other channel
counts or of more than one output a channel, 1-D and 3-D convolutions, products of a transposed
activation, and (dynamic) convolutions.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..graph.core import Graph, Node, Value
from ..ops.gemm_nbits import QUANTIZE_BLOCK
from ..ops.quantized import GROUP, LANES, conv_weights, fold_weights
from ..ops.registry import get as get_op
from ..passes.rewrite import Rewriter
from .calibrate import activation_params, weight_params

ROW_ZERO = 128  # the zero point of quantize_rows' bytes (symmetric codes offset to uint8)


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
    if node.op == "conv2d" and not a["w_block"] and not dynamic and (
            len(node.inputs) == 2 or graph.is_constant(node.inputs[2])):
        if a["groups"] == w.shape[0] == node.inputs[0].type.shape[1]:
            return w.reshape(w.shape[0], -1).T if w.shape[0] % LANES == 0 else None  # depthwise: (KH * KW, C)
        if a["groups"] == 1 or w.shape[1] > 1:  # (grouped: a (KH * KW * Cp, Cout / groups) block a group)
            return conv_weights(w)
    if node.op == "gemm" and not a["trans_a"] and not a["b_panels"] and a["alpha"] == 1 and w.ndim == 2 and (
            len(node.inputs) == 2 or graph.is_constant(node.inputs[2])):
        return w.T if a["trans_b"] else w
    if node.op == "matmul" and w.ndim == 2 and node.inputs[0].type.rank >= 2:
        return w
    return None


def quantize_products(graph: Graph, ranges: Mapping[str, tuple[float, float]] | None, per_channel: bool = True,
                      nhwc: bool = True) -> Graph:
    """The graph with its products on qgemm: activations quantized by the ranges given per value
    name (calibration), or at run time where `ranges` is None (dynamic). nhwc=False leaves each
    convolution's output in NCHW and its epilogue to the operators after it (each product's
    float32 output then reaches memory, as an offloaded product's does)."""
    return _Quantizer(graph, ranges, per_channel, nhwc).run()


class _Quantizer:
    def __init__(self, graph: Graph, ranges, per_channel: bool, nhwc: bool):
        self.graph, self.ranges, self.per_channel, self.nhwc = graph, ranges, per_channel, nhwc
        self.rw = Rewriter(graph)
        self.rows: dict[Value, tuple[Value, tuple]] = {}  # NHWC float rows of a value, and its (N, H, W, C)
        self.quantized: dict[tuple[Value, bool], tuple] = {}  # (value, as rows) -> (uint8, scale, zero point)

    def run(self) -> Graph:
        for node in self.graph.nodes:
            w = _weights(self.graph, node, self.ranges is None)
            if w is not None:
                self._finish(node, self._product(node, w))
            elif not (self.nhwc and self._in_rows(node)):
                self.rw.copy(node, self.rw.inputs(node))
        return self.rw.finish()

    def _emit(self, name, inputs, attrs=None, hint="q"):
        return self.rw.emit(name, inputs, attrs, hint=hint)[0]

    def _finish(self, node: Node, y: Value) -> None:
        """Let y (a new value) stand for the node's output, under its name where it is a graph output."""
        if not self.rw.replace(node, [y]):
            (y,) = self.rw.emit("identity", [y], hint=node.name, out_names=[node.outputs[0].name])
            self.rw.replace(node, [y])

    def _set_rows(self, node: Node, rows: Value, shape: tuple) -> None:
        """Record the node's output as NHWC rows, and give it its NCHW form."""
        self.rows[node.outputs[0]] = rows, shape
        nhwc = self._emit("reshape", [rows], {"shape": shape}, f"{node.name}_nhwc")
        self._finish(node, self._emit("transpose", [nhwc], {"perm": (0, 3, 1, 2)}, f"{node.name}_nchw"))

    # -- activations --------------------------------------------------------------------------

    def _quantize(self, x: Value, as_rows: bool) -> tuple:
        """(uint8 x, its scale, its zero point, its rows' scales or None), once per value and
        form: x's NHWC rows where as_rows and it has them, else x itself (dynamic, a linear
        layer's input: its 2-D rows, each of its own scale, where by_rows takes it)."""
        as_rows = as_rows and x in self.rows
        key = (x, as_rows)
        if key not in self.quantized:
            v = self.rows[x][0] if as_rows else self.rw.value(x)
            if self.ranges is None and by_rows(x.type.shape):
                self.quantized[key] = _quantize_rows(self.rw, v, f"{x.name}_int8")
            else:
                bounds = None if self.ranges is None else self.ranges[x.name]
                self.quantized[key] = (*_quantize(self.rw, v, bounds, f"{x.name}_int8"), None)
        return self.quantized[key]

    def _in_rows(self, node: Node) -> bool:
        """An elementwise node over NHWC rows (and per-channel constants), or a max pool of rows
        that a product reads, computed in rows; False where the node is not one."""
        if node.op == "max_pool2d":
            return self._pool(node)
        op = get_op(node.op)
        out = node.outputs[0].type
        if op.pattern not in ("elementwise", "broadcast") or len(node.outputs) != 1 or out.dtype != "float32" \
                or not any(x in self.rows for x in node.inputs) or {"axis", "axes"} & set(node.attrs):
            return False  # (an axis would name an NCHW dimension)
        shape = next(self.rows[x][1] for x in node.inputs if x in self.rows)
        if tuple(out.shape) != (shape[0], shape[3], shape[1], shape[2]):
            return False
        ins = [self._row_operand(x, shape, len(node.inputs) > 1) for x in node.inputs]
        if any(v is None for v in ins):
            return False
        self._set_rows(node, self._emit(node.op, ins, node.attrs, node.name), shape)
        return True

    def _row_operand(self, x: Value, shape: tuple, binary: bool) -> Value | None:
        """x as an operand over rows of `shape`: its rows (dequantized from uint8 where a product
        quantizes it, so that its float rows need not be stored), or a per-channel or scalar
        constant as a row; None otherwise."""
        if x in self.rows:
            if not (binary and self.ranges is not None and x.name in self.ranges):
                return self.rows[x][0]
            q, s, z, _ = self._quantize(x, True)
            shifted = self._emit("sub", [self._emit("cast", [q], {"dtype": "float32"}), self.rw.constant(
                np.float32(z))])
            return self._emit("mul", [shifted, self.rw.constant(np.float32(s))])
        data = self.graph.constants.get(x.name) if self.graph.is_constant(x) else None
        if data is None or data.dtype != np.float32 or data.ndim > 4:
            return None
        if data.size != 1 and (data.ndim < 3 or data.shape[-3:] != (shape[3], 1, 1) or data.size != shape[3]):
            return None  # (not one value per channel: a 1-D constant of NCHW broadcasts along W)
        return self.rw.constant(data.reshape(-1), f"{x.name}_row")

    def _pool(self, node: Node) -> bool:
        """max_pool2d of NHWC rows whose output a product reads: the uint8 rows pooled."""
        x, y = node.inputs[0], node.outputs[0]
        if x not in self.rows or self.ranges is None or y.name not in self.ranges:
            return False
        n, h, w, c = self.rows[x][1]
        _, _, oh, ow = y.type.shape
        q, s, z = _quantize(self.rw, self.rows[x][0], self.ranges[y.name], f"{y.name}_int8")
        pooled = self._emit("max_pool2d_nchwc", [self._emit("reshape", [q], {"shape": (n, 1, h, w, c)})], node.attrs,
                            node.name)
        self.quantized[(y, True)] = self._emit("reshape", [pooled], {"shape": (n * oh * ow, c)}), s, z, None
        rows = self._emit("max_pool2d_nchwc", [self._emit("reshape", [self.rows[x][0]], {"shape": (n, 1, h, w, c)})],
                          node.attrs, node.name)  # (for whatever reads the float pool: dropped otherwise)
        self._set_rows(node, self._emit("reshape", [rows], {"shape": (n * oh * ow, c)}), (n, oh, ow, c))
        return True

    # -- products -----------------------------------------------------------------------------

    def _product(self, node: Node, w: np.ndarray) -> Value:
        conv = node.op == "conv2d"
        if conv and node.attrs["groups"] > 1 and node.attrs["groups"] == node.inputs[0].type.shape[1]:
            return self._depthwise(node, w)
        rw, graph = self.rw, self.graph
        x = node.inputs[0]
        q, sa, za, row_scales = self._quantize(x, conv and self.nhwc)
        hint = f"{node.name}_int8"  # (the node's own name stays free for a graph output's identity)
        k, n = w.shape
        wq, sw = weight_params(w, self.per_channel)

        def op(name, inputs, attrs=None):
            return rw.emit(name, inputs, attrs, hint=hint)[0]

        shape = x.type.shape
        if conv:
            groups = node.attrs["groups"]
            og = n // groups
            parts = [self._qgemm(self._patches(node, q, za, hint, g), wq[:, g * og:(g + 1) * og],
                                 sw[g * og:(g + 1) * og], sa, za, hint) for g in range(groups)]
            y = parts[0] if groups == 1 else op("concat", parts, {"axis": 1})
        else:
            rows = q if q.type.rank == 2 else op("reshape", [q], {"shape": (int(np.prod(shape[:-1])), k)})
            y = self._qgemm(rows, wq, sw, sa, za, hint, row_scales)
        out_shape = node.outputs[0].type.shape
        if conv:
            if len(node.inputs) == 3:
                b = graph.constants[node.inputs[2].name].astype(np.float32)
                if self.nhwc:
                    y = op("add", [y, rw.constant(b, f"{hint}_b")])
            nhwc = (out_shape[0], *out_shape[2:], n)
            if self.nhwc:
                self.rows[node.outputs[0]] = y, nhwc
            y = op("transpose", [op("reshape", [y], {"shape": nhwc})], {"perm": (0, 3, 1, 2)})
            if len(node.inputs) == 3 and not self.nhwc:
                y = op("add", [y, rw.constant(b.reshape(1, n, 1, 1), f"{hint}_b")])
        elif node.op == "gemm":
            if len(node.inputs) == 3:
                c = graph.constants[node.inputs[2].name].astype(np.float32) * np.float32(node.attrs["beta"])
                y = op("add", [y, rw.constant(c, f"{hint}_c")])
        elif len(shape) != 2:
            y = op("reshape", [y], {"shape": out_shape})
        return y

    def _qgemm(self, rows: Value, wq: np.ndarray, sw: np.ndarray, sa, za, hint: str,
               row_scales: Value | None = None) -> Value:
        """The float32 (M, N) product of uint8 rows (M, K) by int8 weights wq (K, N) of scales sw
        (N,): qgemm over the rows padded to whole K-groups, the zero point's cost in its bias;
        times row_scales (M, 1), the rows' own scales, where given (in the epilogue)."""
        rw = self.rw

        def op(name, inputs, attrs=None):
            return rw.emit(name, inputs, attrs, hint=hint)[0]

        n = wq.shape[1]
        packed, bias0, sums = fold_weights(wq)
        padded = len(bias0)
        sw = np.pad(sw, (0, padded - n), constant_values=1.0)
        if isinstance(za, int):  # static: the bias and the scale are constants
            bias, scale = rw.constant(bias0 - za * sums, f"{hint}_bias"), rw.constant((sa * sw).astype(np.float32))
        else:
            zi = op("cast", [za], {"dtype": "int32"})
            bias = op("sub", [rw.constant(bias0), op("mul", [zi, rw.constant(sums)])])
            scale = op("mul", [sa, rw.constant(sw)])
        if rows.type.shape[1] != packed.shape[1] * GROUP:
            rows = op("pad", [rows], {"pads": (0, 0, 0, packed.shape[1] * GROUP - rows.type.shape[1])})
        y = op("qgemm", [rows, rw.constant(packed, f"{hint}_weights"), bias, scale], {"out_dtype": "float32"})
        if row_scales is not None:
            y = op("mul", [y, row_scales])
        return y if padded == n else op("slice", [y], {"starts": (0,), "ends": (n,), "axes": (1,)})

    def _depthwise(self, node: Node, w: np.ndarray) -> Value:
        """A depthwise convolution (w: its (KH * KW, C) taps) on qdepthwise, over NHWC uint8."""
        x, a = node.inputs[0], node.attrs
        q, sa, za, _ = self._quantize(x, self.nhwc)
        n, c, h, wd = x.type.shape
        hint = f"{node.name}_int8"
        wq, sw = weight_params(w, self.per_channel)
        sums = wq.astype(np.int32).sum(0, dtype=np.int32)
        nhwc = self._emit("reshape", [q], {"shape": (n, h, wd, c)}, hint) if q.type.rank == 2 else \
            self._emit("transpose", [q], {"perm": (0, 2, 3, 1)}, hint)
        kernel = self.graph.constants[node.inputs[1].name].shape[2:]
        y = self._emit("qdepthwise", [nhwc, self.rw.constant(wq.reshape(*kernel, c), f"{hint}_weights"),
                                      self.rw.constant(-za * sums, f"{hint}_bias"),
                                      self.rw.constant((sa * sw).astype(np.float32))], {
            "strides": tuple(a["strides"]), "dilations": tuple(a["dilations"]), "pads": tuple(a["padding"]),
            "pad_value": za}, hint)
        if len(node.inputs) == 3:
            y = self._emit("add", [y, self.rw.constant(self.graph.constants[node.inputs[2].name].astype(
                np.float32), f"{hint}_b")], hint=hint)
        _, _, oh, ow = node.outputs[0].type.shape
        if self.nhwc:
            self.rows[node.outputs[0]] = y, (n, oh, ow, c)
        return self._emit("transpose", [self._emit("reshape", [y], {"shape": (n, oh, ow, c)}, hint)],
                          {"perm": (0, 3, 1, 2)}, hint)

    def _patches(self, node: Node, q: Value, za: int, hint: str, group: int = 0) -> Value:
        """The left operand of a convolution's qgemm (of its `group`'s channels): the uint8 NHWC rows
        themselves for a 1x1 convolution of stride 1 without padding and one group, else im2col
        (whose rows qgemm pads to whole K-groups)."""
        a = node.attrs
        x = node.inputs[0]
        kernel = tuple(self.graph.constants[node.inputs[1].name].shape[2:])
        n, c, h, w = x.type.shape
        groups = a["groups"]
        if q.type.rank == 2:  # rows
            if kernel == (1, 1) and tuple(a["strides"]) == (1, 1) and not any(a["padding"]) and groups == 1:
                return q
            nhwc = self.rw.emit("reshape", [q], {"shape": (n, h, w, c)}, hint=hint)[0]
        else:
            nhwc = self.rw.emit("transpose", [q], {"perm": (0, 2, 3, 1)}, hint=hint)[0]
        if groups > 1:
            cg = c // groups
            nhwc = self.rw.emit("slice", [nhwc], {"starts": (group * cg,), "ends": ((group + 1) * cg,), "axes": (3,)},
                                hint=hint)[0]
        return self.rw.emit("im2col", [nhwc], {
            "kernel": kernel, "strides": tuple(a["strides"]), "dilations": tuple(a["dilations"]),
            "pads": tuple(a["padding"]), "pad_value": za}, hint=hint)[0]


def by_rows(shape) -> bool:
    """Whether a dynamic activation of this shape is quantized a row at a time (quantize_rows):
    static sizes, whole blocks of QUANTIZE_BLOCK columns."""
    return all(isinstance(d, int) for d in shape) and len(shape) >= 2 and shape[-1] % QUANTIZE_BLOCK == 0


def _quantize_rows(rw: Rewriter, x: Value, hint: str) -> tuple:
    """(uint8 rows, scale 1, zero point 128, the rows' scales (R, 1)) of x's 2-D rows (R, K):
    quantize_rows (ember.ops.gemm_nbits: max |row| / 127 a row, offset 128), a kernel of its
    own whose bytes qgemm reads as they are; the constant zero point's cost goes into qgemm's
    bias at compile time and each row's scale multiplies its sums in the epilogue."""
    def op(name, inputs, attrs=None, outputs=1):
        out = rw.emit(name, inputs, attrs, hint=f"{hint}_q")
        return out[0] if outputs == 1 else out

    shape = x.type.shape
    if len(shape) != 2:
        x = op("reshape", [x], {"shape": (int(np.prod(shape[:-1])), shape[-1])})
    xq, meta = op("quantize_rows", [x], outputs=2)
    return xq, np.float32(1), ROW_ZERO, op("slice", [meta], {"starts": (0,), "ends": (1,), "axes": (1,)})


def _quantize(rw: Rewriter, x: Value, bounds: tuple[float, float] | None, hint: str) -> tuple:
    """(uint8 x, its scale, its zero point): a float32 and an int for static ranges, values of the
    graph for dynamic ones (DynamicQuantizeLinear's arithmetic: uint8 over the range of x widened
    to hold 0)."""
    def op(name, inputs, attrs=None):
        return rw.emit(name, inputs, attrs, hint=f"{hint}_q")[0]

    def const(v):
        return rw.constant(np.asarray(v, np.float32), f"{hint}_q")

    if bounds is not None:  # (times the reciprocal: a division costs each epilogue more than it rounds better)
        scale, zero = activation_params(*bounds)
        return _round_clip(rw, op("mul", [x, const(np.float32(1) / scale)]), const(zero), hint), scale, zero
    low = op("minimum", [op("min", [x]), const(0)])
    high = op("maximum", [op("max", [x]), const(0)])
    span = op("sub", [high, low])
    span = op("where", [op("equal", [span, const(0)]), const(1), span])
    s = op("div", [span, const(255)])
    z = op("round", [op("clip", [op("neg", [op("div", [low, s])])], {"min": 0.0, "max": 255.0})])
    return _round_clip(rw, op("div", [x, s]), z, hint), s, z


def _round_clip(rw: Rewriter, scaled: Value, zero: Value, hint: str) -> Value:
    """uint8 clip(rint(scaled) + zero, 0, 255), added and clipped in int32 as QuantizeLinear's
    converter does: a float clip tests each lane for NaN, and the input's quantization, which
    transposes NCHW to NHWC as well, ran 139 us where this runs 6 (ResNet-18's input, one thread
    of an AMD EPYC Zen 5)."""
    def op(name, inputs, attrs=None):
        return rw.emit(name, inputs, attrs, hint=f"{hint}_q")[0]

    q = op("add", [op("cast", [op("round", [scaled])], {"dtype": "int32"}), op("cast", [zero], {"dtype": "int32"})])
    return op("cast", [op("clip", [q], {"min": 0.0, "max": 255.0})], {"dtype": "uint8"})
