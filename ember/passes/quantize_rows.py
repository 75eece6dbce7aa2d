"""int8 products on VNNI for weight-only quantized products, their rows quantized to 8 bits
(ember.ops.gemm_nbits):

- a prefill: a gemm_nbits (of act "auto": weights the user asked to quantize) whose x may have
  GEMM_NBITS_STREAM rows or more (a symbolic M: a prompt) multiplies x's rows quantized to uint8
  (per row, max |x| / 127: about 1% more error in the products) by the weight's codes on VNNI's
  vpdpbusd (ember.codegen.c_gemm_nbits_vnni). Constant codes are packed here once in the
  products' layout (ember.tir.nbits.pack_vnni: int8's in vpdpbusd's order, int4's nibbles in that
  order's two halves, and each group's column sums), which every call would otherwise repack and
  sum, and the kernel quantizes its block of rows itself (act "int8_rows"), so that the
  quantization is no parallel region of its own:

    gemm_nbits(x, codes, ...; act="auto") -> gemm_nbits(x, pack_vnni(codes), ...; act="int8_rows")

  codes given at run time read x's rows quantized once per x by quantize_rows (act "int8"):

    gemm_nbits(x, codes, ...; act="auto") -> gemm_nbits(x, *quantize_rows(x), codes, ...; act="int8")

  vpdpbusd multiplies 64 bytes a vector instruction where the float32 path dequantizes each code
  to an FMA of 16 lanes, so a 128-token prefill no longer runs slower than float32 weights do;
- a decode step (M static below GEMM_NBITS_STREAM): x quantized per group to int8 by
  quantize_groups (llama.cpp's Q8_0; the group ember.tir.nbits.row_group's: the weights', or for
  int8 per channel 32), the codes times its bytes in int32 per group (act
  "int8_groups"; ember.codegen.c_gemv_nbits_vnni), where the float32 GEMV is compute-bound below
  the memory's bandwidth at one thread (int4 and int8 alike). Needs VBMI too (the codes permuted
  into vpdpbusd's layout); a K that 32 does not divide keeps float32 rows.

A target pass (ember.passes.pipeline.TARGET_PASSES): only targets with AVX512-VNNI and AVX512-BW.
"""

from __future__ import annotations

import functools

from ..graph.core import Graph, Node, Value
from ..ops.gemm_nbits import QUANTIZE_BLOCK
from ..target import Target
from ..tir.nbits import pack_vnni, row_group
from ..tir.routines import GEMM_NBITS_STREAM
from .rewrite import Rewriter, rebuild

FEATURES = frozenset({"avx512vnni", "avx512bw"})
GEMV_FEATURES = FEATURES | {"avx512vbmi"}  # a decode step's GEMV


def quantize_rows(graph: Graph, target: Target | None = None) -> Graph:
    """The graph with its gemm_nbits on int8 products where the target (default: C on this
    machine) has VNNI: a prefill's, and a decode step's where it has VBMI too."""
    features = (target or Target()).features
    if not features >= FEATURES:
        return graph
    return rebuild(graph, functools.partial(_rewrite, gemv=features >= GEMV_FEATURES, done={}))


def _rewrite(rw: Rewriter, node: Node, ins: list[Value], gemv: bool, done: dict):
    if node.op != "gemm_nbits" or node.attrs["act"] != "auto":
        return None
    x = ins[0]
    m, k = x.shape
    if isinstance(m, int) and m < GEMM_NBITS_STREAM:
        group = row_group(node.attrs["group"], k) if isinstance(k, int) else 0
        if not gemv or not group:
            return None
        op, attrs, act = "quantize_groups", {"group": group}, "int8_groups"
    elif k % QUANTIZE_BLOCK:
        return None
    else:
        op, attrs, act = "quantize_rows", {}, "int8"
    weights = list(ins[1:])
    codes = rw.constant_data(weights[0])
    if act == "int8" and codes is not None:  # packed once; the kernel quantizes its rows itself
        bits, group, offsets = node.attrs["bits"], node.attrs["group"], node.attrs["offsets"]
        weights[0] = rw.derived(("vnni", weights[0].name, group, offsets),
                                lambda: pack_vnni(codes, bits, group, offsets), hint=f"{weights[0].name}_vnni")
        return rw.emit("gemm_nbits", [x, *weights], {**node.attrs, "act": "int8_rows", "packed": True},
                       hint=node.name, out_names=[node.outputs[0].name])
    key = (x.name, op, attrs.get("group"))
    if key not in done:
        done[key] = rw.emit(op, [x], attrs, hint=f"{node.name}_rows")
    return rw.emit("gemm_nbits", [x, *done[key], *weights], {**node.attrs, "act": act}, hint=node.name,
                   out_names=[node.outputs[0].name])
