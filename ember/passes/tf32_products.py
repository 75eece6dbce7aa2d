"""The products of a model in TF32 for the GPU (`ember.compile(..., precision="tf32",
target="cuda")`): each float32 operand of a matrix product or a convolution rounded to TF32
(ember.ops.bits' round_tf32: 10 mantissa bits, to nearest, ties away from zero, as Tensor Cores
read them), the products summed in float32.

    gemm(a, W, c?)  ->  gemm(round_tf32(a), tf32(W), c?, tf32=True)   tf32(W): rounded at compile time

A constant operand (the weights) is rounded once at compile time; an activation by a round_tf32
node, which the fuser takes into the product's kernel as a prologue where the operator takes one
(matmul and gemm; a convolution reads it from the kernel before). The bias, the epilogue and
everything else stay float32, as are the values in memory: tf32 changes no value's type. A
matmul or gemm is marked `tf32`, which the GPU's schedule takes for TF32 Tensor Cores (whose
wmma steps read their operands as TF32); a convolution's products stay fp32 sums on CUDA cores.
"""

from __future__ import annotations

from ..graph.core import Graph, Value
from ..ops.bits import round_tf32
from .rewrite import Rewriter

# the operators whose first two inputs are multiplied together
PRODUCTS = frozenset({"gemm", "matmul", *(f"conv{n}d" for n in (1, 2, 3)), *(f"conv_transpose{n}d" for n in (1, 2, 3))})


def tf32_products(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    rounded: dict[str, Value] = {}  # an old value's name -> its rounding

    def tf32(old: Value) -> Value:
        if old.type.dtype != "float32":
            return rw.value(old)
        got = rounded.get(old.name)
        if got is None:  # (a constant rounded from the old graph's data: the unrounded copy is never made)
            got = rw.constant(round_tf32(graph.constants[old.name]), f"{old.name}.tf32") if graph.is_constant(old) \
                else rw.emit("round_tf32", [rw.value(old)], hint=f"{old.name}.tf32")[0]
            rounded[old.name] = got
        return got

    for node in graph.nodes:
        if node.op in PRODUCTS:
            marked = {**node.attrs, "tf32": True} if node.op in ("gemm", "matmul") else None
            rw.copy(node, [tf32(v) for v in node.inputs[:2]] + [rw.value(v) for v in node.inputs[2:]], marked)
        else:
            rw.copy(node, rw.inputs(node))
    return rw.finish()
