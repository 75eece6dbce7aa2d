"""A residual added to a prefill's weight-only quantized product is added by the product's
kernel as it writes its rows (gemm_nbits' act int8_rows, `residual`), as float32 products fuse
their epilogues (ember.passes.fuse): a transformer layer's two residual adds are then no parallel
regions of their own, nor a pass over the activations.

    y = gemm_nbits(x, ...; act="int8_rows")                 y: (M, n)
    add(reshape(y, (B..., M', n)), r)   (or add(r, ...))    r: the reshape's shape, float32
      -> reshape(gemm_nbits(x, ..., reshape(r, (M, n)); act="int8_rows", residual=True), (B..., M', n))

Conditions: y and its reshape read by the add alone, r of the sum's own shape (no broadcast).
The reshapes are views. The product and reshape left behind go to dce.
"""

from __future__ import annotations

from ..graph.core import Graph, Node, Value
from .rewrite import Rewriter, rebuild


def nbits_epilogues(graph: Graph) -> Graph:
    if not any(n.op == "gemm_nbits" and n.attrs["act"] == "int8_rows" for n in graph.nodes):
        return graph
    users = graph.users()
    for v in graph.outputs:  # an output is read by the caller too
        users.setdefault(v, []).append(None)
    return rebuild(graph, lambda rw, node, ins: _residual(rw, node, ins, users))


def _residual(rw: Rewriter, node: Node, ins: list[Value], users: dict) -> list[Value] | None:
    if node.op != "add" or node.outputs[0].dtype != "float32":
        return None
    for side in (0, 1):
        product = _product(node.inputs[side], users)
        residual = ins[1 - side]
        if product is not None and residual.type == node.outputs[0].type:
            y = product.outputs[0]
            flat = rw.emit("reshape", [residual], {"shape": y.shape}, hint=f"{node.name}_rows")
            (z,) = rw.emit("gemm_nbits", [*(rw.value(v) for v in product.inputs), *flat],
                           {**product.attrs, "residual": True}, hint=product.name)
            return rw.emit("reshape", [z], {"shape": node.outputs[0].shape}, hint=node.name,
                           out_names=[node.outputs[0].name])
    return None


def _product(v: Value, users: dict) -> Node | None:
    """The gemm_nbits of act int8_rows (no residual yet) whose output v reshapes, read by v's
    reader alone; else None."""
    reshape = v.node
    if reshape is None or reshape.op != "reshape" or len(users.get(v, ())) != 1:
        return None
    y = reshape.inputs[0]
    product = y.node
    if product is None or product.op != "gemm_nbits" or product.attrs["act"] != "int8_rows" or \
            product.attrs["residual"] or len(users.get(y, ())) != 1:
        return None
    return product
