"""int8 products for a prefill: a gemm_nbits (of act "auto": weights the user asked to quantize)
whose x may have GEMM_NBITS_STREAM rows or more (a symbolic M: a prompt) takes its rows also
quantized to uint8, once, by quantize_rows, and computes those products on VNNI, xq's integers
times the weight's codes (ember.ops.gemm_nbits, act "int8"; the kernel:
ember.codegen.c_gemm_nbits_vnni):

    gemm_nbits(x, codes, ...; act="auto") -> gemm_nbits(x, *quantize_rows(x), codes, ...; act="int8")

vpdpbusd multiplies 64 bytes a vector instruction where the float32 path dequantizes each code to
an FMA of 16 lanes, so a 128-token prefill no longer runs slower than float32 weights do. The
rows' 8-bit rounding (per row, max |x| / 127) adds about 1% to the products' error
(ember.ops.gemm_nbits' reference computes the same). A decode step (M static below
GEMM_NBITS_STREAM) keeps float32 activations. A target pass (ember.passes.pipeline.TARGET_PASSES):
only targets with AVX512-VNNI and AVX512-BW; gemm_nbits nodes sharing an x share its quantize_rows.
"""

from __future__ import annotations

import functools

from ..graph.core import Graph, Node, Value
from ..ops.gemm_nbits import QUANTIZE_BLOCK
from ..target import Target
from ..tir.routines import GEMM_NBITS_STREAM
from .rewrite import Rewriter, rebuild

FEATURES = frozenset({"avx512vnni", "avx512bw"})


def quantize_rows(graph: Graph, target: Target | None = None) -> Graph:
    """The graph with its prefill's gemm_nbits on int8 products where the target (default: C on
    this machine) has VNNI."""
    if not (target or Target()).features >= FEATURES:
        return graph
    return rebuild(graph, functools.partial(_rewrite, done={}))


def _rewrite(rw: Rewriter, node: Node, ins: list[Value], done: dict):
    if node.op != "gemm_nbits" or node.attrs["act"] != "auto":
        return None
    x = ins[0]
    m, k = x.shape
    if (isinstance(m, int) and m < GEMM_NBITS_STREAM) or k % QUANTIZE_BLOCK:
        return None
    if x.name not in done:
        done[x.name] = rw.emit("quantize_rows", [x], hint=f"{node.name}_rows")
    attrs = {**node.attrs, "act": "int8"}
    return rw.emit("gemm_nbits", [x, *done[x.name], *ins[1:]], attrs, hint=node.name,
                   out_names=[node.outputs[0].name])
