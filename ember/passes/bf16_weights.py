"""The weights of linear layers in bf16 (`ember.compile(..., precision="bf16")`):

    gemm(a, W, c?; beta)   ->  gemm_bf16(a, pack(bf16(W')), c?; beta)      W' = W.T when trans_b

bf16(W) rounds to nearest even; pack lays it out as the bf16 units read it ([N / 16][K / 2][16][2],
ember.ops.matmul_bf16), once, at compile time. The product then runs on AMX or AVX512-BF16 where
the target has them (ember.schedules.cpu.matmul_bf16), with a rounded to bf16 and the sums in
fp32; the bias, the epilogue and everything else (normalizations, softmax, reductions) stay fp32.

Rewritten: a gemm of a constant 2-D floating-point W (not transposed a, alpha 1) whose N is a
multiple of 16, K of 2 and M a number known at compile time (flatten_products, which runs before,
has made every linear layer such a gemm). Others keep fp32: a product of two activations
(attention's, whose routine computes in fp32), a symbolic number of rows, a classifier of 1000
columns. `kept_fp32` names the gemms of a compiled graph that kept fp32 and why (the compile
report and the summary list them: CompileStats.kept_fp32). Convolutions are left to the layout
pass, which blocks them, and then to ember.passes.bf16_convs, which puts the blocked ones in bf16
where the target's unit pays.
"""

from __future__ import annotations

from ..graph.core import Graph, Node, Value
from ..intrinsics.tiles import LANES, pack
from ..ops.matmul_bf16 import GROUP
from ..tir import dtype as dt
from .rewrite import Rewriter, rebuild


def bf16_weights(graph: Graph) -> Graph:
    return rebuild(graph, _rewrite)


def _rewrite(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    if node.op != "gemm" or node.attrs["b_panels"]:
        return None
    a, b = inputs[:2]
    weights = rw.constant_data(b)
    if weights is None or weights.ndim != 2 or not dt.is_float(b.type.dtype) or not dt.is_float(a.type.dtype):
        return None
    w = weights.T if node.attrs["trans_b"] else weights
    if fp32_reason(node, a, w.shape[1]) is not None:
        return None
    packed = rw.constant(pack(w.astype(dt.to_numpy("bfloat16")), GROUP), f"{b.name}.bf16")
    return rw.emit("gemm_bf16", [a, packed, *inputs[2:]], {"beta": node.attrs["beta"]}, hint=node.name,
                   out_names=[node.outputs[0].name])


def fp32_reason(node: Node, a: Value, n) -> str | None:
    """Why a gemm of constant floating-point weights (N columns) keeps fp32, or None: it goes bf16."""
    if node.attrs["trans_a"] or node.attrs["alpha"] != 1:
        return "its activation transposed or scaled (trans_a, alpha), which the bf16 product does not take"
    m, k = a.type.shape
    if not isinstance(m, int):
        return f"a symbolic number of rows ({m})"
    if not isinstance(k, int) or k % GROUP:
        return f"K={k} is not a multiple of {GROUP} (the bf16 units take K in pairs)"
    if not isinstance(n, int) or n % LANES:
        return f"N={n} is not a multiple of {LANES} (the bf16 units' columns)"
    return None


def kept_fp32(graph: Graph) -> list[str]:
    """One line per gemm of a graph compiled at precision "bf16" that kept fp32: its name, shape
    (M x K x N) and why; a product of two activations too (attention's, computed in fp32)."""
    out = []
    for node in graph.nodes:
        a = node.inputs[0] if node.op == "gemm" else None
        if a is None or not dt.is_float(a.type.dtype) or not dt.is_float(node.inputs[1].type.dtype):
            continue
        n = node.outputs[0].type.shape[-1]
        m, k = a.type.shape[::-1] if node.attrs["trans_a"] else a.type.shape
        reason = fp32_reason(node, a, n) if graph.is_constant(node.inputs[1]) else "a product of two activations"
        out.append(f"{node.name} ({m} x {k} x {n}): {reason or 'its weights laid out for fp32 before the bf16 pass'}")
    return out
