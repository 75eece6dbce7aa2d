"""A static quantization folded into the product before it: each product's epilogue (its
int32 sums to float, times their scale, a bias, an activation, a residual add) then the next
product's quantization (times 1 / scale, rint, plus the zero point, clipped to 0..255 in
int32), as rewrite.py emits them, become

    rint(clip(float(sums) * (scale * c) + (bias * c + z), lo, hi))  to uint8

with c = 1 / scale and z the zero point folded into the product's scale and the constants
before it, the activation's bounds and 0..255 one clip in float32: half the vector
instructions of an epilogue that a 1x1 convolution of few input channels or a depthwise one
spends as much on as on its products (MobileNetV2's 16 -> 96 at 112 x 112: 13 instructions a
vector of 16 outputs for 4 vpdpbusd). The float arithmetic differs from the unfolded one by
roundings of the scales' products (a tie of rint may go the other way), which ember.quantize's
own models need not match bit for bit (ONNX's QDQ models keep ONNX's arithmetic:
frontend/onnx).

c * v + z is pushed through: an add (z into its constant operand, or its first), a clip or ReLU
(c > 0: its bounds c * b + z), a slice, a multiplication by a constant (c into it), a float32
qgemm or qdepthwise with a constant scale (c into the scale); anything else, or a value
something else reads too, stops the fold, which then leaves the quantization as it is.
"""

from __future__ import annotations

import numpy as np

from ..graph.core import Graph, Node, Value
from ..passes.dce import dce
from ..passes.rewrite import Rewriter

PRODUCTS = ("qgemm", "qdepthwise")


def fold_requantization(graph: Graph) -> Graph:
    """The graph with each static uint8 quantization of a product's epilogue folded into it."""
    graph = dce(graph)  # (the NCHW forms nothing reads must not count as readers)
    folder = _Folder(graph)
    rw = folder.rw
    for node in graph.nodes:
        y = folder.fold(node)
        if y is None or not rw.replace(node, [y]):
            rw.copy(node, rw.inputs(node))
    return dce(rw.finish())


class _Folder:
    def __init__(self, graph: Graph):
        self.graph, self.rw = graph, Rewriter(graph)
        users = graph.users()
        outputs = set(graph.outputs)
        self.single = {v for v, ns in users.items() if len(ns) == 1 and v not in outputs}

    def _const(self, v: Value) -> np.ndarray | None:
        return self.graph.constants.get(v.name) if self.graph.is_constant(v) else None

    def _producer(self, v: Value, op: str) -> Node | None:
        """v's node where it is `op` and v is read by one node only."""
        return v.node if v.node is not None and v.node.op == op and v in self.single else None

    def fold(self, node: Node) -> Value | None:
        """The uint8 value for `node` where it ends a quantization that folds, else None.

        The pattern (rewrite._round_clip): cast(uint8) <- clip(0, 255) <- add <- [cast(int32) <-
        round <- mul(x, c)] and [cast(int32) <- the zero point, a scalar constant]."""
        if node.op != "cast" or node.attrs["dtype"] != "uint8":
            return None
        clip = self._producer(node.inputs[0], "clip")
        if clip is None or (clip.attrs["min"], clip.attrs["max"]) != (0, 255):
            return None
        add = self._producer(clip.inputs[0], "add")
        if add is None:
            return None
        rounded = self._producer(add.inputs[0], "cast")
        rnd = rounded is not None and rounded.attrs["dtype"] == "int32" and self._producer(rounded.inputs[0], "round")
        mul = rnd and self._producer(rnd.inputs[0], "mul")
        c = self._const(mul.inputs[1]) if mul else None
        zero = self._zero_point(add.inputs[1])
        if c is None or zero is None or c.size != 1 or not float(c) > 0 or mul.inputs[0] not in self.single:
            return None
        y = self._affine(mul.inputs[0], float(c), zero)
        if y is None:
            return None
        lo, hi = 0.0, 255.0
        if y.node is not None and y.node.op == "clip":  # (one the fold made: nothing else reads it)
            a = y.node.attrs
            lo = lo if a["min"] is None else max(lo, a["min"])
            hi = hi if a["max"] is None else min(hi, a["max"])
            y = y.node.inputs[0]
        emit = self._emit
        clipped = emit("clip", [y], {"min": lo, "max": max(lo, hi)})
        return emit("cast", [emit("cast", [emit("round", [clipped])], {"dtype": "int32"})], {"dtype": "uint8"})

    def _zero_point(self, v: Value) -> float | None:
        """The integer zero point of `cast(int32) <- scalar constant` (or an int32 one), else None."""
        if v.node is not None and v.node.op == "cast" and v in self.single:
            v = v.node.inputs[0]
        z = self._const(v)
        return float(z) if z is not None and z.size == 1 and float(z) == int(z) else None

    def _emit(self, op: str, inputs, attrs=None) -> Value:
        return self.rw.emit(op, inputs, attrs, hint=f"requant_{op}")[0]

    def _constant(self, data: np.ndarray, c: float, z: float) -> Value:
        return self.rw.constant((data.astype(np.float64) * c + z).astype(np.float32), "requant")

    def _shift(self, y: Value, z: float) -> Value:
        return y if z == 0 else self._emit("add", [y, self.rw.constant(np.float32(z), "requant")])

    def _affine(self, v: Value, c: float, z: float) -> Value | None:
        """A new value for c * v + z (c > 0), computed by the ops that compute v; None where it
        cannot be pushed into them."""
        node = v.node
        if node is None or v not in self.single or v.type.dtype != "float32":
            return None
        ins = self.rw.inputs(node)
        if node.op == "add":
            a, b = node.inputs
            consts = [self._const(a), self._const(b)]
            if consts[0] is not None and consts[1] is not None:
                return None
            if consts[1] is None and consts[0] is not None:  # (the shift goes to the constant)
                a, b, consts = b, a, consts[::-1]
            left = self._affine(a, c, 0.0 if consts[1] is not None else z)
            right = self._constant(consts[1], c, z) if consts[1] is not None else self._affine(b, c, 0.0)
            return None if left is None or right is None else self._emit("add", [left, right])
        if node.op in ("clip", "relu"):
            inner = self._affine(node.inputs[0], c, z)
            if inner is None:
                return None
            bounds = (0.0, None) if node.op == "relu" else (node.attrs["min"], node.attrs["max"])
            lo, hi = (None if b is None else float(np.float32(b * c + z)) for b in bounds)
            return self._emit("clip", [inner], {"min": lo, "max": hi})
        if node.op == "slice":
            inner = self._affine(node.inputs[0], c, z)
            return None if inner is None else self._emit("slice", [inner], node.attrs)
        if node.op == "mul":
            k = self._const(node.inputs[1])
            if k is None or k.dtype != np.float32:
                return None
            return self._shift(self._emit("mul", [ins[0], self._constant(k, c, 0.0)]), z)
        if node.op in PRODUCTS and (node.op == "qdepthwise" or node.attrs["out_dtype"] == "float32"):
            scale = self._const(node.inputs[3])
            if scale is None:
                return None
            y = self.rw.emit(node.op, [*ins[:3], self._constant(scale, c, 0.0)], node.attrs, hint=node.name)[0]
            return self._shift(y, z)
        return None
