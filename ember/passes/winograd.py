"""Winograd convolutions: a conv2d_nchwc that is 3x3, stride 1, dilation 1, one group, over a
blocked input with constant weights becomes conv2d_winograd (ember.ops.winograd) where the rule
below says F(2x2, 3x3) or F(4x4, 3x3) beats the blocked direct convolution:

    conv2d_nchwc(x, W, b?) [-> add(., r)] [-> relu]  ->  conv2d_winograd(x, U, b?, r?; relu)

U = G W G^T is computed here, once, in float64 and packed (ember.tir.winograd.pack_weights). The
add of a residual of the output's shape and the ReLU after it are taken into the operator (its
output transform applies them in registers) when the convolution's result has no other use; the
fused node stands where the last of them stood, so that the residual is computed before it.

The rule (`choose_tile`), measured on ResNet-18's layers and a few others (AMD EPYC Zen 5,
AVX-512, one thread, batch 1; benchmarks/winograd_layers.py): F(4x4) on maps of at least 10 x 10
(2.7-3.4x faster than the direct form on ResNet-18's 56, 28 and 14; 1.5x with 16 channels),
F(2x2) on smaller maps down to 4 x 4 (1.8x at 7 x 7 and 2.3x at 4 x 4 with 512 channels, where
F(4x4)'s one or two tiles a side waste most of their products and its weights are 2.25 times
F(2x2)'s); at least 16 channels in and out.
Run after layout and the fold_constants that folds its weight conversions; disabled like any
pass (disabled_passes=("winograd",)), which restores the direct convolutions.
"""

from __future__ import annotations

from ..graph.core import Graph, Node
from ..ops.layout import convert_layout
from ..tir.winograd import pack_weights
from .rewrite import Rewriter

MIN_F4_MAP = 10  # output rows and columns at least this: F(4x4)
MIN_F2_MAP = 4  # at least this (and under MIN_F4_MAP): F(2x2); fewer tiles do not pay for the transforms
MIN_CHANNELS = 16  # input and output channels at least this (measured down to 16)


def choose_tile(channels: int, out_channels: int, out_h: int, out_w: int) -> int | None:
    """The output tile m of F(m x m, 3 x 3) for a layer, or None for the direct convolution."""
    side = min(out_h, out_w)
    if min(channels, out_channels) < MIN_CHANNELS or side < MIN_F2_MAP:
        return None
    return 4 if side >= MIN_F4_MAP else 2


def winograd(graph: Graph) -> Graph:
    """The graph with the 3x3 stride-1 blocked convolutions the rule picks in Winograd's form."""
    users = graph.users()
    plans = {}  # the last node of a fused chain -> (conv, residual value or None, relu)
    skipped: set[int] = set()
    claimed: set[int] = set()  # the adds and relus a fused node takes
    outputs = set(graph.outputs)
    for node in graph.nodes:
        m = _tile(graph, node)
        if m is None:
            continue
        last, residual, relu = node, None, False
        nxt = _only_user(users, last, outputs)
        if nxt is not None and nxt.op == "add" and id(nxt) not in claimed and _residual(nxt, last) is not None:
            skipped.add(id(last))
            last, residual = nxt, _residual(nxt, last)
            nxt = _only_user(users, last, outputs)
        if nxt is not None and nxt.op == "relu" and id(nxt) not in claimed:
            skipped.add(id(last))
            last, relu = nxt, True
        plans[id(last)] = (node, m, residual, relu)
        claimed |= {id(last), *skipped}  # (the add of two convolutions' results goes to the first)
    if not plans:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        if id(node) in skipped:
            continue
        if id(node) not in plans:
            rw.copy(node, rw.inputs(node))
            continue
        conv, m, residual, relu = plans[id(node)]
        x, w, *bias = rw.inputs(conv)
        ib, ob = conv.inputs[0].shape[4], w.shape[5]
        weights = convert_layout(rw.constant_data(w), f"OIHW{ib}i{ob}o", "OIHW")
        u = rw.constant(pack_weights(weights, m, ob), f"{conv.inputs[1].name}.winograd{m}")
        ins = [x, u, *bias] + ([rw.value(residual)] if residual is not None else [])
        out, = rw.emit("conv2d_winograd", ins, {"padding": tuple(conv.attrs["padding"]), "relu": relu,
                                                 "residual": residual is not None},
                       hint=conv.name, out_names=[node.outputs[0].name])
        rw.alias(node.outputs[0], out)
    return rw.finish()


def _tile(graph: Graph, node: Node) -> int | None:
    """F(m x m)'s m for a conv2d_nchwc Winograd can compute, by the rule; else None."""
    if node.op != "conv2d_nchwc" or node.attrs["out_layout"] != "NCHWc" or node.attrs["groups"] != 1:
        return None
    if node.attrs["in_channels"] is not None:  # (a padded block's lanes, which its sum would read)
        return None
    x, w = node.inputs[:2]
    out = node.outputs[0].type
    if (x.type.rank != 5 or not x.type.is_static or out.dtype != "float32" or x.type.dtype != "float32"
            or not graph.is_constant(w) or tuple(w.shape[2:4]) != (3, 3)):
        return None
    if tuple(node.attrs["strides"]) != (1, 1) or tuple(node.attrs["dilations"]) != (1, 1):
        return None
    if not all(0 <= p <= 2 for p in node.attrs["padding"]):
        return None
    return choose_tile(x.shape[1] * x.shape[4], out.shape[1] * out.shape[4], out.shape[2], out.shape[3])


def _only_user(users, node: Node, outputs) -> Node | None:
    """The one node that reads node's output, when that output is not a graph output."""
    v = node.outputs[0]
    found = users.get(v, [])
    return found[0] if len(found) == 1 and v not in outputs and len(found[0].outputs) == 1 else None


def _residual(add: Node, conv: Node):
    """The other operand of add(conv's output, r) when r has the output's type."""
    a, b = add.inputs
    other = b if a is conv.outputs[0] else a
    if other is conv.outputs[0] or other.type != conv.outputs[0].type:
        return None
    return other
