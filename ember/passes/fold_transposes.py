"""Transposes folded into the operators that read them, so that they cost no kernel:

    scaled_dot_product_attention(T(q), T(k), T(v), mask?)  -> T(scaled_dot_product_attention(q, k, v, mask?;
                                                                layout="bshd"))      (and flash_attention)
    gemm(T(a), T(b), c?; trans_a, trans_b)                 -> gemm(a, b, c?; not trans_a, not trans_b)
    matmul(T(a), b), matmul(a, T(b)) of rank 2             -> gemm(a, b; trans_a, trans_b)

where T swaps axes -3 and -2 (the rest in place) for the attention, the two axes of a matrix for
the gemm. An attention whose k and v are such transposes but whose q is not (LLaMA's: the rotary
embedding computed in the heads-first layout) takes T(q) instead: one transpose of the queries
for two of the keys and values (a decode step's cache among them).

A transformer splits heads as reshape(x, (B, S, H, D)) then T, and merges them as T then reshape:
with the attention in layout bshd, the T it now writes meets the T of the merge and simplify
cancels the pair; the reshapes are views of a buffer (no kernel, ember.passes.plan_memory). So
this pass runs before simplify; the transposes it leaves unread go to dce. On the GPU (flash_attention,
ember.passes.unfold_attention) that is two copies of every activation a layer fewer: the kernel reads
each head's rows at the stride of a token's and writes its output in place for the next product.
"""

from __future__ import annotations

from ..graph.core import Graph, Node, Value
from ..ops.attention import SDPA
from .rewrite import Rewriter, rebuild

ATTENTIONS = (SDPA, "flash_attention")  # (the GPU's fused kernel takes the same layouts)


def fold_transposes(graph: Graph) -> Graph:
    return rebuild(graph, _fold)


def _fold(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    if node.op in ATTENTIONS and node.attrs["layout"] == "bhsd":
        return _attention(rw, node, inputs)
    if node.op in ("gemm", "matmul") and all(x.type.rank == 2 for x in inputs[:2]):
        return _gemm(rw, node, inputs)
    return None


def _attention(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    q, k, v = inputs[:3]
    if not (_swaps_heads(k) and _swaps_heads(v)) or q.type.rank < 3 or node.attrs.get("appended"):
        return None
    if _swaps_heads(q):
        q = q.node.inputs[0]
    else:  # the query's rows (RoPE's, a decode step's one) transposed instead of the keys and values
        (q,) = rw.emit("transpose", [q], {"perm": _head_swap(q.type.rank)}, hint=f"{node.name}_query")
    (out,) = rw.emit(node.op, [q, k.node.inputs[0], v.node.inputs[0]] + inputs[3:], {**node.attrs, "layout": "bshd"},
                     hint=node.name)
    return rw.emit("transpose", [out], {"perm": _head_swap(out.type.rank)}, hint=f"{node.name}_heads",
                   out_names=[node.outputs[0].name])


def _gemm(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    a, b = inputs[:2]
    flip_a, flip_b = _swaps_matrix(a), _swaps_matrix(b)
    if not (flip_a or flip_b):
        return None
    attrs = dict(node.attrs) if node.op == "gemm" else {"trans_a": False, "trans_b": False}
    attrs["trans_a"] ^= flip_a
    attrs["trans_b"] ^= flip_b
    ins = [a.node.inputs[0] if flip_a else a, b.node.inputs[0] if flip_b else b, *inputs[2:]]
    return rw.emit("gemm", ins, attrs, hint=node.name, out_names=[node.outputs[0].name])


def _head_swap(rank: int) -> tuple[int, ...]:
    return tuple(range(rank - 3)) + (rank - 2, rank - 3, rank - 1)


def _perm_of(v: Value) -> tuple[int, ...] | None:
    """The permutation of the transpose that made v (axes normalized), or None."""
    if v.node is None or v.node.op != "transpose":
        return None
    return tuple(p % v.type.rank for p in v.node.attrs["perm"])


def _swaps_heads(v: Value) -> bool:
    return v.type.rank >= 3 and _perm_of(v) == _head_swap(v.type.rank)


def _swaps_matrix(v: Value) -> bool:
    return _perm_of(v) == (1, 0)
