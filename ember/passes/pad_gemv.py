"""GEMV column padding: a single-row gemm with a constant weight whose column count half a vector
of the target (its fp32 lanes / 2: the narrowest column tile of the GEMV schedule) does not divide
(GPT-2's vocabulary: 50257) gets its weight (and bias) padded with zero columns to a multiple of
GEMV_COLS, once, here; one that vectors divide but GEMV_MIN_COLS does not (a classifier's 1000
classes) to a multiple of GEMV_MIN_COLS; a slice takes the real columns back (a target pass:
ember.passes.pipeline.TARGET_PASSES; nothing to pad without vectors):

    gemm(x[1, K], w[K, N], c[N]) -> slice(gemm(x, w_padded[K, N'], c_padded[N']), 0:N on axis 1)

A GEMV streams its weight once per call and is bound by memory bandwidth, so its kernel wants
whole vectors and wide column tiles over rows of b (ember.schedules.cpu.matmul). With an odd N
every element of every tile was guarded, and the wide tiles fell back to narrow ones: about a
quarter of the bandwidth. With 1000 columns the tiles were 8 columns wide, 32 bytes of each weight
row 4000 bytes apart: a third of the bandwidth (MobileNetV2's classifier, 347 us where 1024
columns in tiles of 128 take 120, one thread on an AMD EPYC Zen 5). The padding costs at most
GEMV_COLS - 1 columns of weight bytes, and the slice copies one row of the result.
"""

from __future__ import annotations

import functools

import numpy as np

from ..graph.core import Graph, Node, Value
from ..ops.matmul import GEMV_COLS, GEMV_MIN_COLS
from ..target import Target
from .rewrite import Rewriter, rebuild


def pad_gemv(graph: Graph, target: Target | None = None) -> Graph:
    """The graph with single-row gemms' odd weights padded for the target's vectors (default: C
    on this machine)."""
    return rebuild(graph, functools.partial(_rewrite, vector=(target or Target()).lanes("float32") // 2))


def _rewrite(rw: Rewriter, node: Node, ins: list[Value], vector: int):
    if node.op != "gemm" or node.attrs["trans_a"] or node.attrs["trans_b"] or ins[0].shape[0] != 1:
        return None
    w = rw.constant_data(ins[1])
    n = ins[1].shape[1]
    if w is None or not isinstance(n, int) or vector < 2 or n % GEMV_MIN_COLS == 0 or n < GEMV_COLS:
        return None
    pad = -n % (GEMV_COLS if n % vector else GEMV_MIN_COLS)
    inputs = [ins[0], rw.constant(np.pad(w, ((0, 0), (0, pad))), f"{ins[1].name}_padded")]
    if len(ins) == 3:
        c = rw.constant_data(ins[2])
        if c is None:
            return None
        if c.ndim and c.shape[-1] == n:  # per column: padded too; a broadcast scalar stays as it is
            c = np.pad(c, [(0, 0)] * (c.ndim - 1) + [(0, pad)])
        inputs.append(rw.constant(c, f"{ins[2].name}_padded"))
    (y,) = rw.emit("gemm", inputs, node.attrs, hint=f"{node.name}_padded")
    return rw.emit("slice", [y], {"starts": (0,), "ends": (n,), "axes": (1,)}, hint=node.name,
                   out_names=[node.outputs[0].name])
