"""Channels-last activations for a GPU model's convolutions (target "cuda"; Inductor converts a
CUDA model's convolutions to channels_last likewise, and cuDNN's and CUTLASS's implicit GEMMs read
NHWC):

    conv2d(x, W, b?)  ->  conv2d_nhwc_gemm(x', W', b?)

x' the input in NHWC, W' the weights (OC, C, KH, KW) transposed once at compile time to (OC,
KH*KW*C), so that a tap's C channels are contiguous in x' and the product's column tiles are
copied 16 bytes at a time (ember.ops.conv_gemm). One walk in graph order, as the CPU's layout
pass walks NCHW{b}c (ember.passes.layout):

- a 2-D convolution of one group over float16/bfloat16 activations (Tensor Cores) or float32 ones
  (CUDA cores: 4 channels a 16-byte copy) with constant weights and static shapes becomes
  conv2d_nhwc_gemm, reading its input's NHWC form and giving its output one;
  a depthwise one (MobileNet's, between its 1x1 products) depthwise_conv2d_nhwc (an output a
  thread, consecutive threads on consecutive channels), its weights (C, 1, KH, KW) as (KH, KW, C);
- an operator that does not care about the layout follows its inputs into it: the elementwise
  ones (ReLU, clip, a cast) and the NumPy-broadcasting ones (a residual add, where, comparisons),
  where every 4-D operand has an NHWC form, is of size one (a scalar), or is a per-channel
  constant (1, C, 1, 1) or (C, 1, 1) (transposed at compile time);
- a max or average pool of an NHWC value (ResNet's after its stem) is max_pool2d_nhwc or
  avg_pool2d_nhwc (ember.ops.pool_nhwc);
- a mean, sum, max or min over H and W (a global average pool) reduces NHWC's axes (1, 2), and
  a value of a 1 x 1 map goes back to NCHW by a reshape (the same order), not a transpose;
- every other operator (a grouped convolution, a flatten, a graph output) reads NCHW:
  a transpose back is inserted where an NHWC value first meets it, once per value, and a
  transpose into NHWC where a convolution first reads a value that has no NHWC form (the graph's
  input), once per value.

So ResNet's chains of convolutions, ReLUs and residual adds stay NHWC between their
convolutions, with one transpose at the graph's input and one where the chain ends, and
MobileNetV2's inverted residuals (1x1, depthwise 3x3, 1x1, clip, add) likewise. A graph none
of whose dense convolutions reads a multiple of 8 channels (4 in float32: whose columns no
16-byte copy gathers) is left as it is: the transposes would buy nothing. The
convolutions the pass leaves (grouped ones) go on to conv_gemm or stay conv2d.
"""

from __future__ import annotations

import numpy as np

from ..graph.core import Graph, Node, Value
from ..ops.conv_gemm import nhwc_weights
from ..ops.depthwise_nhwc import depthwise_weights
from ..ops.reduction import normalize_axes
from ..ops.registry import get
from ..tir import dtype as dt
from .conv_gemm import HALF
from .layout import BROADCASTING, SPATIAL_REDUCTIONS
from .rewrite import Rewriter

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
TYPES = (*HALF, "float32")  # float32: CUDA cores' implicit GEMM, its columns copied 16 bytes (4 lanes) at a time


def channels_last(graph: Graph) -> Graph:
    """The graph with its half-precision convolutions over NHWC activations (see the module doc)."""
    if not any(_converts(graph, n) and not _depthwise(n) and n.inputs[0].type.shape[1] % _run(n) == 0
               for n in graph.nodes):
        return graph  # (no convolution whose columns a 16-byte copy gathers: the transposes would buy nothing)
    return _ChannelsLast(graph).run()


def _converts(graph: Graph, node: Node) -> bool:
    """node is a convolution the pass makes channels-last: of one group, or depthwise."""
    return (node.op == "conv2d" and (node.attrs["groups"] == 1 or _depthwise(node)) and node.inputs[0].type.rank == 4
            and node.inputs[0].type.dtype in TYPES and node.outputs[0].type.is_static
            and graph.is_constant(node.inputs[1]))


def _run(node: Node) -> int:
    """The channels a 16-byte copy of node's input gathers at once (8 halves, 4 floats)."""
    return 128 // dt.bits(node.inputs[0].type.dtype)


def _depthwise(node: Node) -> bool:
    """node is a depthwise conv2d: a group per channel, one output channel each."""
    x, w = node.inputs[:2]
    return x.type.rank == 4 and node.attrs["groups"] == x.type.shape[1] == w.type.shape[0] and w.type.shape[1] == 1


class _ChannelsLast:
    def __init__(self, graph: Graph):
        self.old = graph
        self.rw = Rewriter(graph)
        self.nhwc: dict[Value, Value] = {}  # an old value -> its NHWC form in the new graph
        self.plain: set[Value] = set()  # old values with an NCHW form in the new graph
        self.outputs = set(graph.outputs)

    def run(self) -> Graph:
        for v in self.old.inputs:
            self.plain.add(v)
        for node in self.old.nodes:
            if _converts(self.old, node):
                self._convolution(node)
            elif not (self._follows(node) or self._pools(node) or self._reduces_space(node)):
                self.rw.copy(node, [self._nchw(v) for v in node.inputs])
                self.plain.update(node.outputs)
        for v in self.old.outputs:
            self._nchw(v)
        return self.rw.finish()

    def _nchw(self, v: Value) -> Value:
        """v's NCHW form, transposed back from its NHWC one where it has none (once; a graph
        output under its own name)."""
        if v in self.plain or v not in self.nhwc:
            return self.rw.value(v)
        names = [v.name] if v in self.outputs else []
        op, attrs = ("reshape", {"shape": tuple(v.type.shape)}) if tuple(v.type.shape[2:]) == (1, 1) else \
            ("transpose", {"perm": TO_NCHW})  # (a 1 x 1 map: the same elements in the same order)
        (out,) = self.rw.emit(op, [self.nhwc[v]], attrs, hint=f"{v.name}_nchw", out_names=names)
        self.rw.alias(v, out)
        self.plain.add(v)
        return out

    def _nhwc_form(self, v: Value) -> Value:
        """v's NHWC form, transposed from its NCHW one where it has none (once)."""
        if v not in self.nhwc:
            if self.old.is_constant(v):
                self.nhwc[v] = self.rw.constant(np.ascontiguousarray(self.old.constants[v.name].transpose(TO_NHWC)),
                                                f"{v.name}.nhwc")
            else:
                (self.nhwc[v],) = self.rw.emit("transpose", [self.rw.value(v)], {"perm": TO_NHWC},
                                               hint=f"{v.name}_nhwc")
        return self.nhwc[v]

    def _convolution(self, node: Node) -> None:
        x, w = node.inputs[:2]
        weights = self.old.constants[w.name]
        op, layout = ("depthwise_conv2d_nhwc", depthwise_weights) if _depthwise(node) else \
            ("conv2d_nhwc_gemm", nhwc_weights)
        flat = self.rw.derived(("nhwc", w.name), lambda: np.ascontiguousarray(layout(weights)), f"{w.name}.nhwc")
        kh, kw = weights.shape[2:]
        attrs = {"kernel": (kh, kw), "strides": tuple(node.attrs["strides"]),
                 "padding": tuple(node.attrs["padding"]), "dilations": tuple(node.attrs["dilations"])}
        bias = [self.rw.value(b) for b in node.inputs[2:]]
        (self.nhwc[node.outputs[0]],) = self.rw.emit(op, [self._nhwc_form(x), flat, *bias], attrs,
                                                     hint=f"{node.name}_nhwc")

    def _pools(self, node: Node) -> bool:
        """A max or average pool of an NHWC value as max_pool2d_nhwc, avg_pool2d_nhwc; False
        (nothing done) for any other node."""
        if node.op not in ("max_pool2d", "avg_pool2d") or node.inputs[0] not in self.nhwc:
            return False
        (self.nhwc[node.outputs[0]],) = self.rw.emit(f"{node.op}_nhwc", [self.nhwc[node.inputs[0]]], node.attrs,
                                                     hint=f"{node.name}_nhwc")
        return True

    def _reduces_space(self, node: Node) -> bool:
        """A mean, sum, max or min over H and W of an NHWC value (a global average pool) over NHWC's
        (1, 2); its output NHWC (N, 1, 1, C) with keepdims, else (N, C) as NCHW's. False
        (nothing done) for any other node."""
        x = node.inputs[0] if node.inputs else None
        if node.op not in SPATIAL_REDUCTIONS or x not in self.nhwc or len(node.outputs) != 1:
            return False
        if set(normalize_axes(node.op, node.attrs["axes"], 4)) != {2, 3}:
            return False
        out = node.outputs[0]
        keep = node.attrs["keepdims"]
        (y,) = self.rw.emit(node.op, [self.nhwc[x]], {**node.attrs, "axes": (1, 2)}, hint=f"{node.name}_nhwc",
                            out_names=[] if keep else [out.name])
        if keep:
            self.nhwc[out] = y
        else:
            self.rw.alias(out, y)
            self.plain.add(out)
        return True

    def _follows(self, node: Node) -> bool:
        """Computes node on its inputs' NHWC forms where it does not care about the layout (see
        the module doc); False (nothing done) where it does, or no input has an NHWC form."""
        elementwise = get(node.op).pattern == "elementwise" or node.op in BROADCASTING
        if (not elementwise or len(node.outputs) != 1 or node.regions or node.outputs[0].type.rank != 4
                or not any(v in self.nhwc for v in node.inputs)):
            return False
        shape = node.outputs[0].type.shape
        kinds = [_kind(self.old, v, shape, v in self.nhwc) for v in node.inputs]
        if None in kinds:
            return False
        inputs = [self._nhwc_form(v) if kind == "nhwc" else self.rw.value(v) if kind == "scalar" else
                  self.rw.derived(("nhwc", v.name), lambda d=self.old.constants[v.name]: d.reshape(-1),
                                  f"{v.name}.nhwc")
                  for v, kind in zip(node.inputs, kinds)]
        (self.nhwc[node.outputs[0]],) = self.rw.emit(node.op, inputs, node.attrs, hint=f"{node.name}_nhwc")
        return True


def _kind(graph: Graph, v: Value, shape, has_nhwc: bool) -> str | None:
    """How an elementwise operator of output `shape` (NCHW) reads operand v in NHWC: "nhwc" (its
    NHWC form: it has one, or it is a constant of that shape), "scalar" (of size one: as it is),
    "channel" (a constant (1, C, 1, 1) or (C, 1, 1): as (C,)); None where it cannot."""
    t = v.type
    if has_nhwc or (tuple(t.shape) == tuple(shape) and graph.is_constant(v)):
        return "nhwc"
    if t.is_static and int(np.prod(t.shape)) == 1:
        return "scalar"
    if graph.is_constant(v) and tuple(t.shape) in ((1, shape[1], 1, 1), (shape[1], 1, 1)):
        return "channel"
    return None
