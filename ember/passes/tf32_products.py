"""The products of a model in TF32 for the GPU (`ember.compile(..., precision="tf32",
target="cuda")`): each float32 operand of a matrix product or a convolution rounded to TF32
(ember.ops.bits' round_tf32: 10 mantissa bits, to nearest, ties away from zero, as Tensor Cores
read them), the products summed in float32.

    gemm(a, W, c?)  ->  gemm(round_tf32(a), tf32(W), c?)      tf32(W): rounded at compile time

A constant operand (the weights) is rounded once at compile time; an activation by a round_tf32
node, which the fuser takes into the product's kernel as a prologue where the operator takes one
(matmul and gemm; a convolution reads it from the kernel before). The bias, the epilogue and
everything else stay float32, as are the values in memory: tf32 changes no value's type.
"""

from __future__ import annotations

from ..graph.core import Graph, Node, Value
from ..ops.bits import round_tf32
from .rewrite import Rewriter, rebuild

# the operators whose first two inputs are multiplied together
PRODUCTS = frozenset({"gemm", "matmul", *(f"conv{n}d" for n in (1, 2, 3)), *(f"conv_transpose{n}d" for n in (1, 2, 3))})


def tf32_products(graph: Graph) -> Graph:
    rounded: dict[str, Value] = {}  # a value's name -> its rounding

    def tf32(rw: Rewriter, v: Value) -> Value:
        if v.type.dtype != "float32":
            return v
        got = rounded.get(v.name)
        if got is None:
            data = rw.constant_data(v)
            got = rw.constant(round_tf32(data), f"{v.name}.tf32") if data is not None else \
                rw.emit("round_tf32", [v], hint=f"{v.name}.tf32")[0]
            rounded[v.name] = got
        return got

    def rewrite(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
        if node.op not in PRODUCTS or all(v.type.dtype != "float32" for v in inputs[:2]):
            return None
        return rw.copy(node, [tf32(rw, v) for v in inputs[:2]] + inputs[2:])

    return rebuild(graph, rewrite)
