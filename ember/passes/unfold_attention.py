"""For a GPU target, scaled_dot_product_attention as the GPU's fused kernel where it applies, else
written out as products and a softmax:

    scaled_dot_product_attention(q, k, v [, mask]; causal, scale)
        -> flash_attention(q, k, v [, mask]; causal, scale, warps)    static head sizes whose tiles fit
                                                                      (the batch and lengths static or
                                                                      symbolic: ember.ops.flash_attention)
        -> matmul(softmax(where(causal, matmul(q, T(k)) * scale, -inf) [+ mask | where mask], axis=-1), v)

since the CPU's fused kernel (ember.ops.attention) is a routine called through te.extern, which
the GPU schedules cannot bind to blocks and threads. flash_attention is one kernel bound to
blocks and threads by itself (tiles in shared memory, an online softmax); the unfolded form is
three kernels the GPU family schedules, with the L x S scores in memory. Only the form the
frontends make is rewritten (layout "bhsd", no heads: it runs where fold_attention, which the
GPU target leaves out, would run, before fold_transposes and fold_qkv_split could change it; they
then fold the heads' layout ops into flash_attention as they do into the CPU's attention). A
row whose every key is masked out is 0 in flash_attention (as torch and the CPU kernel give) and
NaN in the unfolded form (softmax's 0 / 0); the unfolded form's causal mask needs static lengths. Grouped
key/value heads (gqa) are repeated to the query's heads first (static sizes). Targets of the
CPU family keep the fused attention: the pass reads the target and changes nothing for them. A
mask that says nothing the kernel does not know is dropped first, as fold_attention drops it
(`without_known_mask`: GPT-2's constant lower triangle is causal, read from the indices). The
Tensor Core kernel's warps a block (`warps`) are chosen here, from the batch, the queries and the
target's multiprocessors (ember.ops.flash_attention_mma.warps_for; a symbolic size keeps 4).
"""
from __future__ import annotations

import math

import numpy as np

from ..graph.core import Graph, Node, Value
from ..ops import flash_attention_mma as mma
from ..ops.attention import SDPA
from ..ops.flash_attention import choose, tile_rows
from ..target import GPU
from ..tir import dtype as dt
from .fold_attention import without_known_mask
from .rewrite import Rewriter, rebuild


def unfold_attention(graph: Graph, target=None) -> Graph:
    if target is None or target.schedules != "gpu" or not any(n.op == SDPA for n in graph.nodes):
        return graph  # nothing to unfold: the graph itself (the pipeline reports it unchanged)
    return rebuild(graph, lambda rw, node, inputs: _unfolded(rw, node, inputs, target.gpu))


def _unfolded(rw: Rewriter, node: Node, inputs: list[Value], gpu: GPU) -> list[Value] | None:
    if node.op != SDPA or node.attrs.get("layout", "bhsd") != "bhsd" or node.attrs.get("heads") is not None:
        return None
    inputs, attrs = without_known_mask(rw, node, inputs) or (inputs, node.attrs)
    q, k, v, *mask = inputs
    if node.attrs.get("gqa"):
        k, v = (_repeated(rw, x, q.type.shape[-3], f"{node.name}_{n}") for x, n in ((k, "k"), (v, "v")))
        if k is None or v is None:
            return None
        inputs = [q, k, v, *mask]
    if _fits_flash(inputs):
        return rw.emit("flash_attention", inputs, {"causal": attrs["causal"], "scale": attrs["scale"],
                                                   "warps": _warps(q, k, v, gpu)},
                       hint=node.name, out_names=[node.outputs[0].name])
    rank, dtype = k.type.rank, q.type.dtype
    length, keys, e = (d if isinstance(d, int) else None
                       for d in (q.type.shape[-2], k.type.shape[-2], q.type.shape[-1]))
    if e is None or (attrs["causal"] and (length is None or keys is None)):
        return None  # (the scale or the causal mask would need a symbolic size)
    scale = attrs["scale"] if attrs["scale"] is not None else 1 / math.sqrt(e)
    (kt,) = rw.emit("transpose", [k], {"perm": tuple(range(rank - 2)) + (rank - 1, rank - 2)}, hint=f"{node.name}_kt")
    (s,) = rw.emit("matmul", [q, kt], hint=f"{node.name}_scores")
    (s,) = rw.emit("mul", [s, rw.constant(np.array(scale, dtype))], hint=f"{node.name}_scaled")
    minus_inf = rw.constant(np.array(-np.inf, dtype))
    if attrs["causal"]:
        keep = rw.constant(np.tril(np.ones((length, keys), bool)))
        (s,) = rw.emit("where", [keep, s, minus_inf], hint=f"{node.name}_causal")
    if mask:
        m = mask[0]
        (s,) = (rw.emit("where", [m, s, minus_inf], hint=f"{node.name}_masked") if m.type.dtype == "bool"
                else rw.emit("add", [s, m], hint=f"{node.name}_masked"))
    (p,) = rw.emit("softmax", [s], {"axis": -1}, hint=f"{node.name}_p")
    return rw.emit("matmul", [p, v], hint=node.name, out_names=[node.outputs[0].name])


def _repeated(rw: Rewriter, x: Value, heads: int, hint: str) -> Value | None:
    """x (..., Hkv, S, E) with each head repeated to `heads` heads (transformers' repeat_kv: a
    copy, which the GPU's kernels need), or None for symbolic sizes."""
    *lead, hkv, s, e = x.type.shape
    if not all(isinstance(d, int) for d in x.type.shape):
        return None
    (x,) = rw.emit("reshape", [x], {"shape": (*lead, hkv, 1, s, e)}, hint=hint)
    (x,) = rw.emit("expand", [x], {"shape": (*lead, hkv, heads // hkv, s, e)}, hint=hint)
    return rw.emit("reshape", [x], {"shape": (*lead, heads, s, e)}, hint=hint)[0]


def _warps(q: Value, k: Value, v: Value, gpu: GPU) -> int | None:
    """The mma kernel's warps a block for the target GPU's multiprocessors (ember.ops.
    flash_attention_mma.warps_for) where its batch and length are static; None (its default)
    otherwise, and for the other kernels."""
    dtypes = {x.type.dtype for x in (q, k, v)}
    *batch, length, e = q.type.shape
    if choose(q.type.dtype if len(dtypes) == 1 else None, e, v.type.shape[-1], gpu) != "mma" \
            or not all(isinstance(d, int) for d in (*batch, length)):
        return None
    return mma.warps_for(math.prod(batch), length, gpu.multiprocessors)


def _fits_flash(inputs: list[Value]) -> bool:
    """Static head sizes whose tiles fit, float operands, a bool or float mask."""
    q, k, v, *mask = inputs
    static = all(isinstance(x.type.shape[-1], int) for x in (q, v))  # (the batch and lengths may be symbolic)
    floats = all(dt.is_float(x.type.dtype) for x in (q, k, v)) and all(
        dt.is_float(m.type.dtype) or dt.is_bool(m.type.dtype) for m in mask)
    return static and floats and q.type.rank >= 2 and tile_rows(q.type.shape[-1], v.type.shape[-1]) is not None
