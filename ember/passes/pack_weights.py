"""Constant weights of a matrix product packed once, at compile time, into the panels the register
tile reads (ember.ops.matmul, b_panels), and a convolution's into its blocks (see the end):

    gemm(a, W, c?; trans_b)  -> gemm(a, panels(W'), c?; b_panels=P)      W' = W.T when trans_b
    matmul(a, W)             -> gemm(a, panels(W); b_panels=P)          a and W 2-D

panels(W) = W reshaped (K, N / P, P) and transposed to (N / P, K, P). A register tile of P columns
then reads its P weights of row k right after those of row k - 1: one contiguous stream per tile,
instead of K rows N floats apart (with K = 3072 and N = 768 that is a new page at every k, and the
TLB and the prefetchers lose track; the 128 x 3072 x 768 down-projection of a transformer ran at
two thirds of the speed of a square GEMM).

Packed: weights of at least MIN_WEIGHTS elements and N a multiple of P. P is the register tile's
width: 2 vectors, or 4 for fewer than 4 rows (ember.schedules.cpu.tiling), of the target's fp32
lanes (a target pass: ember.passes.pipeline.TARGET_PASSES), for m >= 2 rows or a symbolic number
of rows (a prefill compiled for any sequence length: its rows are as many as its tokens, and a
panel serves a single row too, one contiguous stream per tile). A single row known at compile
time (a GEMV: a decode step's products) takes the GEMV's column tile, up to 8 vectors
(ember.ops.matmul.gemv_panel_width), its tile then streaming one panel from end to end: its
weights read row-major were K runs of a tile's width N floats apart, the hardware prefetchers
restarting at every run (GPT-2's 768 x 2304 product at one thread 10 -> 27 GB/s, 2.6x; NumPy's
sgemv 18.5 and a copy 23 GB/s in the same minutes; AMD EPYC Zen 4).

    conv{1,2,3}d(x, W, bias?) -> conv{1,2,3}d(x, packed(W), bias?; w_block=B, w_shape=W's shape)

A convolution the layout pass leaves as it is (a 1-d or 3-d one, a grouped one, an isolated one)
reads its float32 constant weights packed as its PACK stage would pack them at every call
(ember.ops.conv.pack_weights: blocks of B output channels, the target's fp32 lanes, in the last
axis), once here instead; those its compute reads per output element stay as they are.

A mixture-of-experts grouped_matmul's constant expert weights go into panels too, per expert
(ember.passes.pack_experts).
"""

from __future__ import annotations

import functools

import numpy as np

from ..graph.core import Graph, Node, Value
from ..ops.conv import pack_weights as pack_conv_weights
from ..ops.conv import packed_form
from ..ops.matmul import gemv_panel_width
from ..target import Target, aligned_copy
from ..tir import dtype as dt
from .pack_experts import pack_experts
from .rewrite import Rewriter, rebuild

MIN_WEIGHTS = 64 * 1024  # elements: 256 KiB of float32, beyond L1 and most of L2 per panel set


def pack_weights(graph: Graph, target: Target | None = None) -> Graph:
    """The graph with constant weights in panels (convolutions': blocks) for the target's vectors
    (default: C on this machine)."""
    target = target or Target()
    return rebuild(graph, functools.partial(_pack, lanes=target.lanes("float32"), align=target.align))


def panel_width(m: int | str, n: int, lanes: int) -> int | None:
    """The register tile's width over n columns for m rows (a symbol: any number) and vectors of
    `lanes`, when it divides n (none without vectors)."""
    widths = (4 * lanes, 2 * lanes) if isinstance(m, int) and m < 4 else (2 * lanes,)
    return next((w for w in widths if lanes > 1 and n % w == 0), None)


def _width(m: int | str, k: int, n: int, lanes: int) -> int | None:
    """The panel width of (k, n) weights that m rows read, or None to keep them as they are."""
    rows = not isinstance(m, int) or m >= 2
    return panel_width(m, n, lanes) if rows and k * n >= MIN_WEIGHTS else None


def _pack(rw: Rewriter, node: Node, inputs: list[Value], lanes: int, align: int) -> list[Value] | None:
    if node.op in CONVS:
        return _pack_conv(rw, node, inputs, lanes)
    if node.op == "grouped_matmul":
        return pack_experts(rw, node, inputs, functools.partial(_width, lanes=lanes), align)
    if node.op not in ("gemm", "matmul") or node.attrs.get("b_panels"):
        return None
    a, b = inputs[:2]
    weights = rw.constant_data(b)
    if weights is None or a.type.rank != 2 or b.type.rank != 2 or not dt.is_float(b.type.dtype):
        return None
    trans_a = node.op == "gemm" and node.attrs["trans_a"]
    trans_b = node.op == "gemm" and node.attrs["trans_b"]
    m = a.type.shape[1 if trans_a else 0]
    k, n = weights.shape[::-1] if trans_b else weights.shape
    width = gemv_panel_width(n, lanes) if m == 1 and k * n >= MIN_WEIGHTS else _width(m, k, n, lanes)
    if width is None:
        return None
    panels = rw.derived(("panels", b, trans_b, width), lambda: _panels(weights, trans_b, width, align),
                        f"{b.name}.panels")
    attrs = {**(node.attrs if node.op == "gemm" else {}), "trans_b": False, "b_panels": width}
    return rw.emit("gemm", [a, panels, *inputs[2:]], attrs, hint=node.name, out_names=[node.outputs[0].name])


def _panels(weights: np.ndarray, trans_b: bool, width: int, align: int) -> np.ndarray:
    """One copy: W' = W.T's panels read straight from W's rows (reshaping W.T would copy it first),
    into the aligned memory the compiled model holds its weights in (it takes them as they are)."""
    k, n = weights.shape[::-1] if trans_b else weights.shape
    if not weights.flags.c_contiguous:  # (W.T of a C-order W: a linear layer's weight, imported as a view)
        weights, trans_b = weights.T, not trans_b
    view = weights.reshape(n // width, width, k).transpose(0, 2, 1) if trans_b else \
        weights.reshape(k, n // width, width).transpose(1, 0, 2)
    return aligned_copy(view, align)


CONVS = ("conv1d", "conv2d", "conv3d")


def _pack_conv(rw: Rewriter, node: Node, inputs: list[Value], lanes: int) -> list[Value] | None:
    weights = rw.constant_data(inputs[1])
    groups = node.attrs["groups"]
    if node.attrs["w_block"] or weights is None or weights.dtype != np.float32 or lanes < 2 or \
            packed_form(weights.shape[0], weights.shape[1], groups, lanes) is None:
        return None
    packed = rw.derived(("conv", inputs[1], groups), lambda: pack_conv_weights(weights, groups, lanes),
                        f"{inputs[1].name}.packed")
    attrs = {**node.attrs, "w_block": lanes, "w_shape": tuple(weights.shape)}
    return rw.emit(node.op, [inputs[0], packed, *inputs[2:]], attrs, hint=node.name,
                   out_names=[node.outputs[0].name])
