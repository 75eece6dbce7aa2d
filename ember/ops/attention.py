"""scaled_dot_product_attention(q, k, v, mask?; causal, scale): softmax(q k^T * scale + mask) v
over the last two dimensions, as torch.nn.functional.scaled_dot_product_attention computes it.

q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev); batch dimensions broadcast. The scale
defaults to 1/sqrt(E). A bool mask keeps where True, a float mask is added; both broadcast to
(..., L, S). causal keeps key j for query i when j <= i. A row with every key masked out (False,
or -inf added) is 0, as torch 2.13 gives for both kinds of mask (its safe softmax); softmax itself
would give 0 / 0 = NaN, as ONNX's reference Attention does.

layout "bshd" (default "bhsd") takes q (..., L, H, E), k (..., S, H, E), v (..., S, H, Ev) and gives
(..., L, H, Ev): the heads after the sequence, as a linear layer's output reshaped to heads is, so
that a model's head split and merge (transposes of axes -3 and -2 around the attention,
ember.passes.fold_transposes) need no kernel. It computes the same as the default layout on the
inputs with axes -3 and -2 swapped, the result swapped back; the mask still broadcasts to the
scores (..., H, L, S).

heads (count, q_first, k_first, v_first), layout bshd only: q, k and v are heads [first, first +
count) of their inputs (axis -2), so that one fused projection's output, reshaped to
(..., L, 3 H, E), is read in place as all three (ember.passes.fold_qkv_split) instead of being
split into three copies. The result has `count` heads.

appended (a decode step over a cache kept in place): two more inputs, k_new and v_new, one
position each, are the keys and values after k's and v's: the attention reads
concat(k, k_new) and concat(v, v_new) on the sequence axis without making them, so that a cache
the caller keeps in its own buffer is read where it is, once, and only the step's new row is
written (ember.passes.fold_cache_append makes it from that concat).

gqa (grouped-query attention, torch's enable_gqa): k and v have Hkv heads (axis -3 in the default
layout), a divisor of q's H; query head h reads key/value head h // (H / Hkv), as transformers'
repeat_kv would make them, without the copy. k and v may both be bfloat16 under a float32 q (with
`appended`, k_new and v_new float32 or bfloat16): a cache kept in half the bytes, read converted
to float32 (ember.passes.kv_cache). Or both int8 under a float32 q: rows of E codes and their
float32 scale (ember.tir.kv_int8, the last axis E + 4), a quarter of the bytes, which one query's
attention (the decode routine) reads dequantized in registers; they hold codes * scale.

float32 attention with static embedding sizes (E, Ev) is fused, flash-attention style, whatever
its sequence lengths, heads and batch (symbols included: a prefill of any length, a decode step
over a cache of any length): one te.extern runs a parallel loop over (batch..., head, block of ATTENTION_ROWS queries)
that calls the attention routine (ember.tir.routines; its C in ember.codegen.c_attention) on
the operands where they are: the scores of one block of keys at a time in a register tile, an
online softmax (running maximum and sum, the output rescaled as the maximum grows), and p v
accumulated in registers. No row of scores outlives its block of keys, and nothing of size
L x S reaches memory. One query (a decode step: L = 1, not causal) takes the decode routine
instead, one call per batch element computing every head (each key/value head's group of query
heads), a block of keys at a time, so that the keys and values are read once and a
position-major cache streams once; the call shares its keys among the threads itself
(ember.codegen.c_attention_decode); it also reads
a bfloat16 cache (with float32 k_new and v_new), which more queries read in the staged compute,
and an int8 one, which only it reads.

Other dtypes (float16, float64) and symbolic embedding sizes take the staged compute: a row-wise softmax
in stages (scores q k^T, their row maximum, the exponentials, their row sum, and the weighted
sum of v divided by it), each stage in parallel over (batch, query row). Pattern `opaque`.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dims, te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.arith import simplify
from ..tir.expr import Var, as_int, cast, const, convert, min_
from ..tir.kv_int8 import SCALE_BYTES, dequantize_rows
from ..tir.routines import ATTENTION, ATTENTION_DECODE, ATTENTION_ROWS
from ..tir.stmt import CallRoutine, For, Pointer
from .common import broadcast_index, broadcast_shapes, check_float, result_dtype, te_shape
from .hints import PACK
from .registry import OpDef, OpTypeError, register

SDPA = "scaled_dot_product_attention"  # the operator's name, which passes match
LAYOUTS = ("bhsd", "bshd")


def _heads_first(t: TensorType) -> TensorType:
    """A bshd type in the default layout: axes -3 and -2 swapped."""
    return TensorType(t.shape[:-3] + (t.shape[-2], t.shape[-3], t.shape[-1]), t.dtype)


def _appended(types, attrs):
    """The inputs with k_new and v_new (attribute appended) written into k and v as their types
    (arrays) after the cache's: what the attention computes over."""
    if not attrs.get("appended"):
        return list(types)
    *types, kn, vn = types
    if isinstance(kn, TensorType):
        axis = -3 if attrs["layout"] == "bshd" else -2
        for name, old, new in (("k", types[1], kn), ("v", types[2], vn)):
            if new.rank != old.rank or new.shape[axis] != 1 or new.shape[:axis] + new.shape[axis + 1:] != \
                    old.shape[:axis] + old.shape[axis + 1:] or new.dtype not in (old.dtype, types[0].dtype):
                raise OpTypeError(f"scaled_dot_product_attention: {name}_new must be {name} {old.shape} with one "
                                  f"position on axis {axis}, got {new.dtype} {new.shape}")
        grown = [TensorType(t.shape[:axis] + (dims.add(t.shape[axis], 1),) + t.shape[axis + 1:], t.dtype)
                 for t in types[1:3]]
        return [types[0], *grown, *types[3:]]
    axis = -3 if attrs["layout"] == "bshd" else -2
    return [types[0], *(np.concatenate([c.astype(np.float32), n.astype(np.float32)], axis)
                         for c, n in ((types[1], kn), (types[2], vn))), *types[3:]]


def _int8_rows(types):
    """The inputs with an int8 cache's k and v (rows of codes and a scale, ember.tir.kv_int8)
    as what they hold: float32 rows of E values (types or arrays)."""
    q, k, v = types[:3]
    if not (k.dtype == v.dtype == "int8" and q.dtype == "float32"):
        return list(types)
    if not isinstance(k, TensorType):
        return [q, dequantize_rows(k), dequantize_rows(v), *types[3:]]
    if not all(isinstance(x.shape[-1], int) and x.shape[-1] > SCALE_BYTES for x in (k, v)):
        raise OpTypeError(f"scaled_dot_product_attention: an int8 cache's rows are E codes and a 4-byte scale "
                          f"(E + 4 on the last axis, static); got k {k.shape}, v {v.shape}")
    rows = [TensorType(x.shape[:-1] + (x.shape[-1] - SCALE_BYTES,), "float32") for x in (k, v)]
    return [q, *rows, *types[3:]]


def infer(types, attrs):
    """The result's type in any layout, of heads, appended keys or grouped heads (flash_attention's too)."""
    if len(types) < 3 + 2 * bool(attrs.get("appended")):
        raise OpTypeError("scaled_dot_product_attention: appended takes q, k, v[, mask], k_new, v_new")
    if attrs.get("appended") and attrs.get("heads") is not None:
        raise OpTypeError("scaled_dot_product_attention: appended keys take whole k and v, not heads of them")
    types = _appended(_int8_rows(types), attrs)
    if attrs["layout"] not in LAYOUTS:
        raise OpTypeError(f"scaled_dot_product_attention: layout must be one of {LAYOUTS}, got {attrs['layout']!r}")
    if attrs.get("heads") is not None:
        types = _check_heads(types, attrs)
    if attrs["layout"] == "bshd":
        if min(t.rank for t in types[:3]) < 3:
            raise OpTypeError(f"scaled_dot_product_attention: layout bshd needs q, k, v of rank >= 3, got "
                              f"{', '.join(str(t.shape) for t in types[:3])}")
        (out,) = infer_heads_first([_heads_first(t) for t in types[:3]] + list(types[3:]), attrs)
        return [_heads_first(out)]
    return infer_heads_first(types, attrs)


def _check_heads(types, attrs) -> list[TensorType]:
    """The types of q, k and v's heads that attribute `heads` selects (and the mask's type)."""
    heads = attrs.get("heads")
    if attrs["layout"] != "bshd" or len(heads) != 4 or not all(isinstance(h, int) and h >= 0 for h in heads) \
            or heads[0] < 1:
        raise OpTypeError(f"scaled_dot_product_attention: heads must be (count, q_first, k_first, v_first), "
                          f"count >= 1, with layout bshd; got {heads} with layout {attrs['layout']!r}")
    count, firsts = heads[0], heads[1:]
    for name, t, first in zip("qkv", types, firsts):
        if t.rank < 3 or (isinstance(t.shape[-2], int) and first + count > t.shape[-2]):
            raise OpTypeError(f"scaled_dot_product_attention: {name} {t.shape} has no heads [{first}, "
                              f"{first + count}) on axis -2")
    return [TensorType(t.shape[:-2] + (count, t.shape[-1]), t.dtype) for t in types[:3]] + list(types[3:])


def _select_heads(inputs, attrs) -> list:
    """q, k, v as arrays of the heads `heads` selects (the reference's view of them)."""
    count, *firsts = attrs.get("heads")
    return [x[..., f:f + count, :] for x, f in zip(inputs[:3], firsts)] + list(inputs[3:])


def kv_groups(q_shape, k_shape, v_shape, attrs) -> int:
    """Query heads per key/value head: q's heads (axis -3, heads first) over k's and v's with
    attribute gqa, else 1."""
    if not attrs.get("gqa"):
        return 1
    heads = [as_int(s[-3]) if len(s) >= 3 and not isinstance(s[-3], str) else None for s in (q_shape, k_shape, v_shape)]
    if not all(isinstance(h, int) and h > 0 for h in heads) or heads[1] != heads[2] or heads[0] % heads[1]:
        raise OpTypeError(f"scaled_dot_product_attention: gqa needs static heads on axis -3 (heads first), k's and "
                          f"v's equal and dividing q's; got q {q_shape}, k {k_shape}, v {v_shape}")
    return heads[0] // heads[1]


def _value_dtype(q: TensorType, k: TensorType, v: TensorType) -> str:
    """The result's dtype: q's, with k and v of it, or both bfloat16 under a float32 q (a cache
    kept in half the bytes)."""
    if q.dtype == "float32" and k.dtype == v.dtype == "bfloat16":
        return q.dtype
    return result_dtype(SDPA, q, k, v)


def infer_heads_first(types, attrs):
    q, k, v = types[:3]
    dtype = _value_dtype(q, k, v)
    check_float(SDPA, q)
    if kv_groups(q.shape, k.shape, v.shape, attrs) > 1:  # broadcast as if repeated to q's heads
        k, v = (TensorType(x.shape[:-3] + (q.shape[-3],) + x.shape[-2:], x.dtype) for x in (k, v))
    if min(q.rank, k.rank, v.rank) < 2:
        raise OpTypeError(f"scaled_dot_product_attention: q, k, v must have rank >= 2, got {q.shape}, {k.shape}, "
                          f"{v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise OpTypeError(f"scaled_dot_product_attention: q's and k's embedding sizes differ: {q.shape} vs {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise OpTypeError(f"scaled_dot_product_attention: k and v have different sequence lengths: {k.shape} vs "
                          f"{v.shape}")
    batch = broadcast_shapes(SDPA, q.shape[:-2], k.shape[:-2], v.shape[:-2])
    scores = batch + (q.shape[-2], k.shape[-2])
    if len(types) == 4:
        mask = types[3]
        if not (dt.is_bool(mask.dtype) or mask.dtype == dtype):
            raise OpTypeError(f"scaled_dot_product_attention: mask must be bool or {dtype}, got {mask.dtype}")
        if mask.rank > len(scores) or any(d not in (1, want) for d, want in zip(mask.shape[::-1], scores[::-1])):
            raise OpTypeError(f"scaled_dot_product_attention: mask {mask.shape} does not broadcast to the scores "
                              f"{scores}")
    if attrs["scale"] is None and isinstance(q.shape[-1], str):
        raise OpTypeError("scaled_dot_product_attention: the default scale needs a known embedding size")
    return [TensorType(batch + (q.shape[-2], v.shape[-1]), dtype)]


def _scale(attrs, e: int) -> float:
    return 1 / math.sqrt(e) if attrs["scale"] is None else attrs["scale"]


def reference(inputs, attrs):
    inputs = _appended(_int8_rows(inputs), attrs)
    if attrs.get("heads") is not None:
        inputs = _select_heads(inputs, attrs)
    q, k, v = (x.astype(np.float64) for x in inputs[:3])
    if attrs["layout"] == "bshd":
        q, k, v = (np.swapaxes(x, -3, -2) for x in (q, k, v))
    groups = kv_groups(q.shape, k.shape, v.shape, attrs)
    if groups > 1:
        k, v = (np.repeat(x, groups, axis=-3) for x in (k, v))
    s = q @ np.swapaxes(k, -1, -2) * _scale(attrs, q.shape[-1])
    keep = np.ones(s.shape[-2:], bool)
    if attrs["causal"]:
        keep = np.tril(keep)
    if len(inputs) == 4:
        mask = inputs[3]
        if mask.dtype == bool:
            keep = keep & mask
        else:
            s = s + mask
    s = np.where(keep, s, -np.inf)
    top = s.max(axis=-1, keepdims=True, initial=-np.inf)  # (no keys at all: -inf, the output 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(s - np.where(top == -np.inf, 0, top))  # every key masked out: p = 0
        total = p.sum(axis=-1, keepdims=True)
        out = np.where(total == 0, 0, p @ v / total)
    if attrs["layout"] == "bshd":
        out = np.swapaxes(out, -3, -2)
    return [np.ascontiguousarray(out.astype(inputs[0].dtype))]


def _compute(inputs, attrs, out_types):
    new = inputs[-2:] if attrs.get("appended") else None
    if new is not None:
        inputs = inputs[:-2]
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) == 4 else None
    static = as_int(q.shape[-1]) is not None and as_int(v.shape[-1]) is not None  # E and Ev
    kv = k.dtype if k.dtype == v.dtype and all(x.dtype == "float32" for x in new or ()) else None
    if static and q.dtype == "float32" and kv in ("float32", "bfloat16", "int8") and \
            (mask is None or mask.dtype in ("bool", "float32")):
        if as_int(_swap(q.shape, attrs["layout"] == "bshd")[-2]) == 1 and not attrs["causal"]:
            return [_fused(q, k, v, mask, attrs, out_types, new, decode=True)]
        if kv == "float32":
            return [_fused(q, k, v, mask, attrs, out_types, new)]
    if "int8" in (k.dtype, v.dtype):
        raise OpTypeError(f"scaled_dot_product_attention: an int8 cache is read by one query's attention only (a "
                          f"decode step, not causal, float32 q and mask, float32 k_new and v_new); got q {q.dtype} "
                          f"{q.shape}, k {k.dtype}, v {v.dtype}")
    if new is not None:  # the staged stages read the keys whole: concatenated, as stages
        inputs = [inputs[0], *(_grown(x, n, attrs) for x, n in zip(inputs[1:3], new)), *inputs[3:]]
    if attrs.get("heads") is not None:  # the staged stages read q, k, v whole: their heads copied out
        count, *firsts = attrs.get("heads")
        inputs = [_heads_of(x, count, f, n) for x, f, n in zip(inputs[:3], firsts, "qkv")] + list(inputs[3:])
    bshd = attrs["layout"] == "bshd"
    groups = kv_groups(*(_swap(x.shape, bshd) for x in inputs[:3]), attrs)
    if groups > 1:  # the staged stages read one head per query head: each key/value head repeated
        inputs = [inputs[0], *(_repeated(x, groups, bshd) for x in inputs[1:3]), *inputs[3:]]
    return _staged(inputs, attrs, out_types)


def _grown(x, new, attrs):
    """concat(x, new) on the sequence axis, as a stage (in new's dtype: a bfloat16 cache's
    float32 row stays exact)."""
    axis = x.ndim - (3 if attrs["layout"] == "bshd" else 2)
    n = x.shape[axis]
    shape = x.shape[:axis] + (n + 1,) + x.shape[axis + 1:]
    return te.compute(shape, lambda *i: te.if_then_else(
        i[axis] < n, cast(new.dtype, x[i[:axis] + (min_(i[axis], n - 1),) + i[axis + 1:]]),
        new[i[:axis] + (0,) + i[axis + 1:]]), name="appended")


def _repeated(x, groups: int, bshd: bool):
    """x with each head repeated `groups` times (transformers' repeat_kv), as a stage."""
    axis = x.ndim - (2 if bshd else 3)
    shape = x.shape[:axis] + (x.shape[axis] * groups,) + x.shape[axis + 1:]
    return te.compute(shape, lambda *i: x[i[:axis] + (i[axis] // groups,) + i[axis + 1:]], name="repeated")


def _heads_of(x, count: int, first: int, name: str):
    """Heads [first, first + count) of a bshd tensor, as a stage."""
    return te.compute(x.shape[:-2] + (count, x.shape[-1]), lambda *i: x[i[:-2] + (i[-2] + first, i[-1])],
                      name=f"{name}_heads")


def _swap(i, bshd: bool) -> tuple:
    """An index (or shape) in the heads-first order, from or to layout bshd (axes -3 and -2 swapped)."""
    return tuple(i[:-3]) + (i[-2], i[-3], i[-1]) if bshd else tuple(i)


def _strides(shape) -> list:
    """Row-major element strides of a shape."""
    out, step = [], const(1)
    for d in reversed(shape):
        out.append(step)
        step = step * d
    return out[::-1]


def _fused(q, k, v, mask, attrs, out_types, new=None, decode: bool = False):
    """The fused kernel (see the module doc): the attention routine per block of queries, or
    (`decode`: one query) the decode routine per batch element, every head in one call."""
    bshd = attrs["layout"] == "bshd"
    count, *firsts = attrs.get("heads") or (None, 0, 0, 0)
    qs, ks, vs = (_swap(x.shape if count is None else x.shape[:-2] + (count, x.shape[-1]), bshd) for x in (q, k, v))
    e_dim, ev_dim = as_int(qs[-1]), as_int(vs[-1]) - (SCALE_BYTES if v.dtype == "int8" else 0)  # an int8 row's scale
    s_dim, l_dim = ks[-2], qs[-2]  # static or symbolic
    if new is not None:
        s_dim = s_dim + 1
    scale = _scale(attrs, e_dim)
    groups = kv_groups(qs, ks, vs, attrs)
    out_shape = te_shape(out_types[0], [q, k, v] + ([mask] if mask is not None else []) + list(new or []))
    batch = list(_swap(out_shape, bshd)[:-2])
    heads = convert(batch[-1] if batch else 1)
    if decode and batch:
        batch[-1] = 1  # one call computes every head, a block of keys at a time
    rows = as_int(l_dim)
    blocks = const(1) if decode else const(-(-rows // ATTENTION_ROWS)) if rows is not None else \
        (l_dim + (ATTENTION_ROWS - 1)) // ATTENTION_ROWS

    operands = [q, k, v] + ([mask] if mask is not None else []) + list(new or [])
    ins = list(dict.fromkeys(operands))  # q, k, v may be one tensor
    slots = [ins.index(x) for x in operands]

    def build(bufs, outs):
        bufs = [bufs[a] for a in slots]
        qb, kb, vb = bufs[:3]
        (out,) = outs
        t = Var("block", dt.INDEX_DTYPE)
        rest, index = t // blocks, []
        for d in reversed(batch):
            index.append(rest % d)
            rest = rest // d
        index = index[::-1]
        # the query head's index (decode: the group's first), and its key/value head's
        kv_index = index
        if groups > 1:
            index, kv_index = (index[:-1] + [index[-1] * groups], index) if decode else \
                (index, index[:-1] + [index[-1] // groups])

        def base(buf, heads_first_shape, first=0, at=index):
            """The offset of the (batch..., 0, 0) element of buf (heads counted from `first`), and
            its heads-first strides."""
            st = _swap(_strides(buf.shape), bshd)
            at = broadcast_index(at, heads_first_shape[:-2])
            return sum((i * s for i, s in zip(at, st)), const(first) * st[-3] if first else const(0)), st

        q_off, q_st = base(qb, qs, firsts[0])
        k_off, k_st = base(kb, ks, firsts[1], kv_index)
        v_off, v_st = base(vb, vs, firsts[2], kv_index)
        o_off, o_st = base(out, _swap(out.shape, bshd))
        q0 = (t % blocks) * ATTENTION_ROWS
        reads = [Pointer(qb, q_off), Pointer(kb, k_off), Pointer(vb, v_off)]
        m_hs = m_rs = m_cs = const(0)
        if mask is not None:
            mb = bufs[3]
            m_st = _strides(mb.shape)
            at = broadcast_index(index + [0, 0], mb.shape)
            reads.append(Pointer(mb, sum((i * s for i, s in zip(at, m_st)), const(0))))
            if mb.ndim >= 2 and as_int(mb.shape[-2]) != 1:
                m_rs = m_st[-2]
            if as_int(mb.shape[-1]) != 1:
                m_cs = m_st[-1]
            if mb.ndim >= 3 and as_int(mb.shape[-3]) != 1:
                m_hs = m_st[-3]
        if new is not None:
            kn_shape, vn_shape = (_swap(x.shape, bshd) for x in new)
            reads += [Pointer(bufs[-2], base(bufs[-2], kn_shape, at=kv_index)[0]),
                      Pointer(bufs[-1], base(bufs[-1], vn_shape, at=kv_index)[0])]
        kind = "none" if mask is None else "bool" if dt.is_bool(mask.dtype) else "additive"
        scale_c = const(float(scale), "float32")
        appended = (("appended", True),) if new is not None else ()
        if decode:
            def head(st, shape):  # the heads' stride, 0 where they broadcast
                return st[-3] if len(st) >= 3 and as_int(shape[-3]) != 1 else const(0)

            kn_hs = vn_hs = const(0)
            if new is not None:
                kn_hs, vn_hs = (head(_swap(_strides(b.shape), bshd), _swap(b.shape, bshd)) for b in bufs[-2:])
            params = (("mask", kind), ("kv", kb.dtype), ("lanes", attrs["lanes"]), ("dims", (e_dim, ev_dim, groups)))
            call = CallRoutine(ATTENTION_DECODE, params + appended, tuple(reads), (Pointer(out, o_off),),
                               (heads // groups, const(groups), s_dim, const(e_dim), const(ev_dim), head(q_st, qs),
                                head(k_st, ks), k_st[-2], head(v_st, vs), v_st[-2],
                                head(o_st, _swap(out.shape, bshd)), m_hs, m_cs, kn_hs, vn_hs, scale_c))
        else:
            call = CallRoutine(ATTENTION, (("mask", kind), ("causal", bool(attrs["causal"])),
                                           ("lanes", attrs["lanes"])) + appended, tuple(reads), (Pointer(out, o_off),),
                               (q0, min_(const(ATTENTION_ROWS), l_dim - q0), s_dim, const(e_dim), const(ev_dim),
                                q_st[-2], k_st[-2], v_st[-2], o_st[-2], m_rs, m_cs, scale_c))
        total = blocks
        for d in batch:
            total = total * d
        # one decode call shares its keys among the threads itself: the loop over the batch is
        # parallel only where it has more than one call (a call inside runs on its thread alone)
        loop = "serial" if decode and as_int(simplify(total)) == 1 else "parallel"
        return For(t, const(0), total, loop, call)

    return te.extern([(out_shape, q.dtype)], ins, build, name="attention")[0]


def _staged(inputs, attrs, out_types):
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) == 4 else None
    acc = dt.compute_dtype(q.dtype)
    bshd = attrs["layout"] == "bshd"

    def swap(i) -> tuple:
        """An index (or shape) in the heads-first order the stages use, from or to the op's layout."""
        return tuple(i[:-3]) + (i[-2], i[-3], i[-1]) if bshd else tuple(i)

    qs, ks, vs = swap(q.shape), swap(k.shape), swap(v.shape)
    e_dim, s_dim = qs[-1], ks[-2]
    scale = _scale(attrs, as_int(e_dim))
    rows = list(swap(te_shape(out_types[0], inputs))[:-1])
    nb = len(rows) - 1

    def batched(shape, i):
        return broadcast_index(i[:nb], shape[:-2])

    # k transposed once (a PACK stage), so that the scores' register tile reads rows of it
    kt = te.compute(ks[:-2] + (e_dim, s_dim), lambda *i: k[swap(i[:-2] + (i[-1], i[-2]))], name="k_transposed",
                    tag=PACK)
    re = te.reduce_axis((0, e_dim), name="e")
    qk = te.compute(rows + [s_dim], lambda *i: te.sum(
        cast(acc, q[swap(batched(qs, i) + (i[nb], re))]) * cast(acc, kt[batched(ks, i) + (re, i[nb + 1])]),
        axis=re), name="scores")

    def score(i):
        """The scaled, masked score at (batch..., query, key) index i."""
        value = qk[i] * scale
        keep = None
        if attrs["causal"]:
            keep = i[nb + 1] <= i[nb]
        if mask is not None:
            m = mask[broadcast_index(i, mask.shape)]
            if dt.is_bool(mask.dtype):
                keep = m if keep is None else te.all(keep, m)
            else:
                value = value + cast(acc, m)
        return value if keep is None else te.if_then_else(keep, value, te.max.identity(acc))

    rj = te.reduce_axis((0, s_dim), name="j")
    row_max = te.compute(rows, lambda *i: te.max(score(i + (rj,)), axis=rj), name="row_max")
    def shift(*i):  # every key masked out: 0, so that p = exp(-inf) = 0, not exp(-inf + inf) = NaN
        return te.if_then_else(row_max[i] == te.max.identity(acc), te.const(0, acc), row_max[i])

    safe_max = te.compute(rows, shift, name="row_shift")
    p = te.compute(rows + [s_dim], lambda *i: te.exp(score(i) - safe_max[i[:-1]]), name="exp")
    rj2 = te.reduce_axis((0, s_dim), name="j")
    denom = te.compute(rows, lambda *i: te.sum(p[i + (rj2,)], axis=rj2), name="row_sum")
    rj3 = te.reduce_axis((0, s_dim), name="j")
    weighted = te.compute(rows + [vs[-1]], lambda *i: te.sum(
        p[i[:-1] + (rj3,)] * cast(acc, v[swap(batched(vs, i) + (rj3, i[-1]))]), axis=rj3), name="weighted")
    def normalized(*i):  # 0 where every key is masked out (denom 0)
        d = denom[swap(i)[:-1]]
        return cast(q.dtype, te.if_then_else(d == 0, te.const(0, acc), weighted[swap(i)] / d))

    return [te.compute(swap(weighted.shape), normalized, name="attention")]


register(OpDef(
    name=SDPA,
    infer=infer,
    reference=reference,
    compute=_compute,
    pattern="opaque",
    attrs={"causal": False, "scale": None, "layout": "bhsd", "heads": None, "appended": False, "gqa": False},
    num_inputs=(3, 6),
    doc="softmax(q k^T * scale + mask) v, with an optional causal mask; layout bhsd or bshd; q, k, v as heads of "
        "one packed input.",
    lanes=True,
))
