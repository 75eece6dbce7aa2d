"""Attention that reads its q, k and v from the pieces of one split reads the split's input in
place: the fused QKV projection's output (ember.passes.fuse_siblings, or a model's own c_attn)
is never copied into three tensors.

    q, k, v = split(x, axis=-1, sizes)            x: (..., N), pieces (..., n_i)
    scaled_dot_product_attention(reshape(q, (B..., L, H, E)), reshape(k, ...), reshape(v, ...);
                                 layout="bshd")
      -> scaled_dot_product_attention(x', x', x'; layout="bshd", heads=(H, q0, k0, v0))
         where x' = reshape(x, (B..., L, N / E, E)), a view, and q0 = (sizes before q's piece) / E

The attention kernel (ember.ops.attention, or the GPU's flash_attention) then reads rows of q, k
and v with the stride of x' rows. Conditions: static heads and head sizes (the tokens and batch
may be symbolic); the three reshapes only split each piece's last axis into (H, E) (the leading
sizes flatten to x's); one E for q, k and v, dividing every piece's offset;
an attention without `heads` already. The split itself goes to dce once nothing else reads it.
It runs after fuse_siblings, which makes the split of a QKV projection.
"""

from __future__ import annotations

from .. import dims
from ..graph.core import Graph, Node, Value
from .fold_transposes import ATTENTIONS
from .rewrite import Rewriter, rebuild


def fold_qkv_split(graph: Graph) -> Graph:
    if not any(n.op in ATTENTIONS and n.attrs["layout"] == "bshd" and n.attrs["heads"] is None for n in graph.nodes):
        return graph
    return rebuild(graph, _fold)


def _fold(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    if node.op not in ATTENTIONS or node.attrs["layout"] != "bshd" or node.attrs["heads"] is not None:
        return None
    pieces = [_piece(x) for x in inputs[:3]]
    if any(p is None for p in pieces) or len({id(p[0]) for p in pieces}) != 1:
        return None
    split = pieces[0][0]
    x = split.inputs[0]
    (heads, e), lead = inputs[0].type.shape[-2:], inputs[0].type.shape[:-2]
    if any(v.type.shape[-1] != e or v.type.shape[:-2] != lead or v.type.shape[-2] != heads for v in inputs[:3]):
        return None
    offsets = [sum(split.attrs["sizes"][:k]) for _, k in pieces]
    if any(o % e for o in offsets) or x.type.shape[-1] % e:
        return None
    (packed,) = rw.emit("reshape", [x], {"shape": (*lead, x.type.shape[-1] // e, e)}, hint=f"{node.name}_qkv")
    attrs = {**node.attrs, "heads": (heads, *(o // e for o in offsets))}
    return rw.emit(node.op, [packed, packed, packed, *inputs[3:]], attrs, hint=node.name,
                   out_names=[node.outputs[0].name])


def _piece(v: Value) -> tuple[Node, int] | None:
    """(the split, which of its outputs) when v is a piece of a split along its last axis,
    reshaped to (..., H, E) with the leading sizes flattening to the piece's; else None."""
    if v.node is None or v.node.op != "reshape" or v.type.rank < 3:
        return None
    piece = v.node.inputs[0]
    split = piece.node
    if split is None or split.op != "split" or split.attrs["axis"] % piece.type.rank != piece.type.rank - 1:
        return None
    shape, whole = v.type.shape, piece.type.shape
    if not all(isinstance(d, int) for d in (*shape[-2:], whole[-1])):
        return None
    if dims.mul(*shape[:-2]) != dims.mul(*whole[:-1]) or shape[-2] * shape[-1] != whole[-1]:
        return None
    return split, split.outputs.index(piece)
