"""Attention written out as products and a softmax becomes one scaled_dot_product_attention, so
that it runs as the fused kernel (ember.ops.attention) instead of materializing the scores:

    matmul(softmax(matmul(q, kT) [* c | / c] [+ mask], axis=-1), v)
        -> scaled_dot_product_attention(q, T(kT), v [, mask]; scale=c | 1/c | 1)

which is how ONNX exports of BERT and GPT-2 (and models written with explicit products in torch)
spell attention. The spellings of other exporters and models fold too:

    where(m, scores, c) for "+ mask"            a bool mask m, c a constant -inf (or a finite
                                                c <= -1e30 with m a constant that keeps a key in
                                                every row: GPT-2's eager torch.where(causal, s, min))
    matmul(q * c1, kT * c2)                     scale c1 c2 (the dynamo ONNX exporter's sqrt(scale)
                                                on each side)
    where(not_equal(p, p), 0, p) for p          the exporter's NaN guard after the softmax: folded
                                                when no row can have every key masked out (no
                                                mask, or a constant one that keeps a key per row;
                                                a NaN in q, k or v aside)
    reshape(transpose(reshape(k)), ...) for kT  the batch dimensions merged around the swap of
                                                the last two axes

And a constant mask that says nothing the kernel does not know is dropped, also from the
attention this pass makes:

    scaled_dot_product_attention(q, k, v, mask)  -> scaled_dot_product_attention(q, k, v; causal=True)
        where mask is a constant bool lower triangle (key j kept for query i when j <= i: GPT-2's),
        or a float one of zeros there and -inf (or <= -1e30) above (the dynamo ONNX exporter's)
    scaled_dot_product_attention(q, k, v, mask)  -> scaled_dot_product_attention(q, k, v)
        where mask is a constant bool of all True, or a constant float of all zeros (BERT's, with
        no padding), or a bool made of positions that keeps every key (ember.passes.position_masks:
        torch's trace of a transformers decode step, arange(past + 1) <= past + arange(1))

so that the kernel computes the causal mask from the indices (and skips the keys above the
diagonal) instead of reading a mask. kT is the keys with their last two axes swapped; when a transpose made it, T is
folded into that transpose (so that fold_transposes, which runs next, sees the head split of
q, k and v). c is a scalar constant; the mask is added (a float mask) and must broadcast to the
scores. Each intermediate (the scores, scaled, masked, and the softmax) must have no other use.
"""

from __future__ import annotations

import numpy as np

from ..graph.core import Graph, Node, Value
from ..ops.attention import SDPA
from ..ops.registry import OpTypeError, infer_types
from .position_masks import ALL, CAUSAL, kept_keys
from .rewrite import Rewriter, rebuild


def fold_attention(graph: Graph) -> Graph:
    uses: dict[Value, int] = {}
    for node in graph.nodes:
        for v in node.inputs:
            uses[v] = uses.get(v, 0) + 1
    for v in graph.outputs:
        uses[v] = uses.get(v, 0) + 1
    if not any((n.op == "matmul" and n.inputs[0].node is not None and n.inputs[0].node.op in ("softmax", "where"))
               or (n.op == SDPA and len(n.inputs) == 4) for n in graph.nodes):
        return graph  # nothing to fold: the graph itself (the pipeline reports it unchanged)
    return rebuild(graph, lambda rw, node, inputs: _folded(rw, node, uses) or _plain_mask(rw, node, inputs))


def _folded(rw: Rewriter, node: Node, uses: dict[Value, int]) -> list[Value] | None:
    """The attention `node` ends (see _fold), its constant mask dropped where the kernel knows it."""
    found = _fold(rw, node, uses)
    if found is None:
        return None
    ins, attrs = _without_mask(rw, *found) or found
    return rw.emit(SDPA, ins, attrs, hint=node.name, out_names=[node.outputs[0].name])


def _plain_mask(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    """The attention without its mask (see without_known_mask), or None."""
    found = without_known_mask(rw, node, inputs)
    return None if found is None else rw.emit(SDPA, *found, hint=node.name, out_names=[node.outputs[0].name])


def without_known_mask(rw: Rewriter, node: Node, inputs: list[Value]) -> tuple[list[Value], dict] | None:
    """(q, k, v; attributes) of the attention `node` on `inputs` without a mask that says nothing
    its kernel does not know (_without_mask, _without_position_mask), or None. The GPU's
    flash_attention asks it too (ember.passes.unfold_attention): GPT-2's constant lower triangle
    read per score became causal, which also skips the tiles of keys above the diagonal."""
    if node.op != SDPA:
        return None
    return _without_mask(rw, inputs, node.attrs) or _without_position_mask(rw, node, inputs)


def _without_position_mask(rw: Rewriter, node: Node, inputs: list[Value]) -> tuple[list[Value], dict] | None:
    """(q, k, v; attributes) of the attention `node` without its bool mask where the mask is made
    of positions (ember.passes.position_masks) and keeps every key, or exactly the causal ones of
    as many queries as keys: torch's trace of transformers' decode step passes
    arange(past + 1) <= past + arange(1), every key, to every attention, read from memory and
    applied at every step; else None."""
    if len(inputs) != 4 or inputs[3].type.dtype != "bool":
        return None
    kept = kept_keys(node.inputs[3], rw.old.constants)
    if kept == ALL:
        return inputs[:3], dict(node.attrs)
    if kept == CAUSAL:
        return inputs[:3], {**node.attrs, "causal": True}
    return None


def _without_mask(rw: Rewriter, inputs: list[Value], attrs) -> tuple[list[Value], dict] | None:
    """(q, k, v; attributes) of the attention on `inputs` without its mask, where the mask is a
    constant that keeps every key or exactly the causal ones (see the module doc); else None."""
    if len(inputs) != 4:
        return None
    mask = rw.constant_data(inputs[3])
    if mask is None:
        return None
    rank = max(x.type.rank for x in inputs[:3])
    heads_first = attrs["layout"] == "bhsd"
    q, k = (x.type.shape for x in inputs[:2])
    l_dim, s_dim = (q[-2], k[-2]) if heads_first else (q[-3], k[-3])
    if not (isinstance(l_dim, int) and isinstance(s_dim, int)) or mask.ndim > rank:
        return None
    full = np.broadcast_to(mask, mask.shape[:-2] + (l_dim, s_dim)) if mask.ndim >= 2 else np.broadcast_to(
        mask, (l_dim, s_dim))
    causal = attrs["causal"]
    tril = np.tril(np.ones((l_dim, s_dim), bool))
    if mask.dtype == bool and full.all():
        pass
    elif mask.dtype == bool and (full == tril).all():
        causal = True
    elif mask.dtype != bool and not full.any():
        pass
    elif mask.dtype != bool and l_dim <= s_dim and not full[..., tril].any() and (full[..., ~tril] <= -1e30).all():
        causal = True  # exp(s - 1e30 - max) is 0 as exp(-inf) is, and the diagonal keeps a key per row
    else:
        return None
    return inputs[:3], {**attrs, "causal": causal}



def _fold(rw: Rewriter, node: Node, uses: dict[Value, int]) -> tuple[list[Value], dict] | None:
    """(inputs, attributes) of the attention that `node` (a matmul of a softmax and v) ends, or None."""
    if node.op != "matmul":
        return None
    p, v = node.inputs
    sole = lambda x: x.node is not None and uses.get(x, 0) == 1  # noqa: E731
    p, guarded = _unguarded(rw, p, sole, uses)
    if not (p.node is not None and p.node.op == "softmax" and p.node.attrs["axis"] % p.type.rank == p.type.rank - 1
            and (guarded or sole(p))):
        return None
    x = p.node.inputs[0]
    found, mask = _scaled_scores(rw, x, sole), None
    if found is None and sole(x) and x.node.op == "add":
        a, b = x.node.inputs
        found, mask = _scaled_scores(rw, a, sole), b
        if found is None:
            found, mask = _scaled_scores(rw, b, sole), a
    if found is None and sole(x) and x.node.op == "where":
        found, mask = _masked_by_where(rw, x.node, sole)
    kept = _kept_by_position(rw, mask, x.node.op == "where") if found is not None and mask is not None else None
    if found is None or (guarded and mask is not None and kept is None and not _keeps_a_key_per_row(rw, mask)):
        return None
    q, kt, scale = found
    if min(q.type.rank, kt.type.rank, v.type.rank) < 2 or q.type.dtype != v.type.dtype:
        return None
    if kept == CAUSAL and not (q.type.shape[-2] == v.type.shape[-2] == mask.type.shape[-1]):
        return None  # (the mask's one position broadcast over more queries or keys)
    k = _swap_last(rw, kt)
    ins = [rw.value(q), k, rw.value(v)] + ([rw.value(mask)] if mask is not None and kept is None else [])
    attrs = {"causal": kept == CAUSAL, "scale": scale, "layout": "bhsd", "heads": None}
    try:
        infer_types(SDPA, [x.type for x in ins], attrs)
    except OpTypeError:  # a mask that does not broadcast to the scores, batch dims that do not match
        return None
    return ins, attrs


def _unguarded(rw: Rewriter, p: Value, sole, uses: dict[Value, int]) -> tuple[Value, bool]:
    """(s, True) when p is where(not_equal(s, s), 0, s), the NaN guard (s's only uses); else (p, False)."""
    if not (sole(p) and p.node.op == "where"):
        return p, False
    cond, zero, s = p.node.inputs
    if not (sole(cond) and cond.node.op == "not_equal" and cond.node.inputs[0] is s and cond.node.inputs[1] is s
            and uses.get(s, 0) == 3 and _scalar(rw, zero) == 0.0):
        return p, False
    return s, True


def _masked_by_where(rw: Rewriter, where: Node, sole) -> tuple[tuple | None, Value | None]:
    """((q, kT, scale), m) when `where` is where(m, scaled scores, c) for a bool mask m (see the
    module doc for c); else (None, None)."""
    m, x, c = where.inputs
    fill = _scalar(rw, c)
    if fill is None or not (fill == -np.inf or (fill <= -1e30 and _keeps_a_key_per_row(rw, m))):
        return None, None
    found = _scaled_scores(rw, x, sole)
    return (found, m) if found is not None else (None, None)


def _kept_by_position(rw: Rewriter, mask: Value, boolean: bool) -> str | None:
    """Which keys a mask made of positions keeps (ember.passes.position_masks: ALL or CAUSAL):
    the bool mask of a where, or an additive one, where(m, 0, c) or where(equal(where(m, a, 0), 0), c, 0)
    for a nonzero a (onnxscript's causal attention), c as _masked_by_where takes it."""
    constants = rw.old.constants
    if boolean:
        return kept_keys(mask, constants)
    if mask.node is None or mask.node.op != "where":
        return None
    m, zero, fill = mask.node.inputs
    if _scalar(rw, zero) == 0.0 and (_scalar(rw, fill) or 0.0) <= -1e30:
        return kept_keys(m, constants)
    m, fill, zero = mask.node.inputs  # the keys dropped where m is True
    if not (_scalar(rw, zero) == 0.0 and (_scalar(rw, fill) or 0.0) <= -1e30 and m.node is not None
            and m.node.op == "equal" and _scalar(rw, m.node.inputs[1]) == 0.0):
        return None
    kept = m.node.inputs[0].node
    if kept is None or kept.op != "where" or _scalar(rw, kept.inputs[2]) != 0.0:
        return None
    one = kept.inputs[1]
    one = one.node.inputs[0] if one.node is not None and one.node.op == "expand" else one
    return kept_keys(kept.inputs[0], constants) if _scalar(rw, one) not in (None, 0.0) else None


def _keeps_a_key_per_row(rw: Rewriter, mask: Value) -> bool:
    """Whether the mask is a constant that keeps a key in every row (bool: a True; additive: a
    finite value), so that no row of the attention is all masked out."""
    data = rw.old.constants.get(mask.name) if mask.node is None else None
    if data is None:
        return False
    keep = data if data.dtype == bool else np.isfinite(data)
    return bool(keep.reshape(-1, keep.shape[-1]).any(axis=-1).all()) if keep.ndim else bool(keep)


def _scaled_scores(rw: Rewriter, x: Value, sole) -> tuple[Value, Value, float] | None:
    """(q, kT, scale) when x is matmul(q, kT), times or divided by a scalar constant if at all,
    each of q and kT times a scalar constant if at all."""
    scale = 1.0
    if sole(x) and x.node.op in ("mul", "div"):
        a, c = _scaled(rw, x)
        if c is None or c == 0:
            return None
        x, scale = a, (c if x.node.op == "mul" else 1.0 / c)
    if not (sole(x) and x.node.op == "matmul"):
        return None
    q, kt = x.node.inputs
    for operand in (q, kt):
        if sole(operand) and operand.node.op == "mul":
            a, c = _scaled(rw, operand)
            if c is not None:
                q, kt = (a, kt) if operand is q else (q, a)
                scale *= c
    return q, kt, scale


def _scaled(rw: Rewriter, x: Value) -> tuple[Value, float | None]:
    """(a, c) when x is a * c or a / c (c * a for a product) for a scalar constant c; (x, None) else."""
    a, b = x.node.inputs
    c = _scalar(rw, b)
    if c is None and x.node.op == "mul":
        a, c = b, _scalar(rw, a)
    return (a, c) if c is not None else (x, None)


def _scalar(rw: Rewriter, v: Value) -> float | None:
    """The value of a constant of one element, or None."""
    data = rw.constant_data(rw.value(v)) if v.node is None else None
    if data is None or data.size != 1 or not np.issubdtype(data.dtype, np.floating):
        return None
    return float(data.reshape(()))


def _swap_last(rw: Rewriter, kt: Value) -> Value:
    """kt with its last two axes swapped, in the new graph: a transpose folded into the one that
    made kt, or none when they cancel."""
    rank = kt.type.rank
    swap = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    k = _merged_swap(kt)
    if k is not None:
        return rw.value(k)
    source, perm = rw.value(kt), swap
    if kt.node is not None and kt.node.op == "transpose":
        first = tuple(a % rank for a in kt.node.attrs["perm"])
        source, perm = rw.value(kt.node.inputs[0]), tuple(first[a] for a in swap)
    if perm == tuple(range(rank)):
        return source
    (out,) = rw.emit("transpose", [source], {"perm": perm}, hint=f"{kt.name}_keys")
    return out


def _merged_swap(kt: Value) -> Value | None:
    """k when kt is reshape(transpose(reshape(k, (B, S, E)), (0, 2, 1)), (..., E, S)): k's last
    two axes swapped with its batch dimensions merged around the swap; else None."""
    if kt.node is None or kt.node.op != "reshape" or kt.type.rank < 3:
        return None
    t = kt.node.inputs[0]
    if t.node is None or t.node.op != "transpose" or t.type.rank != 3:
        return None
    if tuple(a % 3 for a in t.node.attrs["perm"]) != (0, 2, 1):
        return None
    merged = t.node.inputs[0]
    if merged.node is None or merged.node.op != "reshape":
        return None
    k = merged.node.inputs[0]
    want = k.type.shape[:-2] + (k.type.shape[-1], k.type.shape[-2])
    return k if kt.type.shape == want and merged.type.shape[1:] == k.type.shape[-2:] else None
