"""What a tensorized call (ember.tir.schedule.tensorize) touches of a buffer, as indices, and the
call moved onto a compacted copy of that buffer: what compact_buffers needs to shrink a shared
tile or a register tile that only tensorized calls read or write.

A call names each argument by a flat, row-major offset and the strides it walks along each of
its intrinsic's dimensions (the call's trailing scalars). For a buffer of constant shape, the
offset splits back into one index per dimension, `(offset % stride[d-1]) // stride[d]`, which
the analyzer reduces to the affine indices it was built from; the call touches the box from
those indices, `(extent - 1) * step + 1` long in each dimension it walks (its description's
extent; the step 1, or the group's size where one dimension is walked in several of the
description's: a row of K bytes as K / 4 groups of 4) and one in the others.
"""

from __future__ import annotations

from .arith import Analyzer
from .expr import Buffer, PrimExpr, Var, as_int, binary, const
from .functor import substitute
from .stmt import CallRoutine, Pointer
from .tensor_intrin import get_intrin


def is_tensorized(call: CallRoutine) -> bool:
    return "intrin" in dict(call.params)


def _row_major(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _arguments(call: CallRoutine):
    """(pointer, its description buffer, the strides it walks) for each argument of the call."""
    it = get_intrin(dict(call.params)["intrin"])
    walked = call.scalars[dict(call.params)["c_scalars"]:]
    out, at = [], 0
    for p, d in zip(call.reads + call.writes, it.desc.params):
        n = len(d.shape)
        out.append((p, d, walked[at:at + n]))
        at += n
    return it, out


def _dims(buf: Buffer, strides: tuple[PrimExpr, ...], ana: Analyzer) -> list[tuple[int, int]] | None:
    """The buffer's dimension each walked stride runs along and its step there, in indices of that
    dimension (more than 1 where a dimension is walked in groups: K in groups of 4); None where
    the shape or a stride is not constant."""
    shape = [as_int(d) for d in buf.shape]
    if None in shape:
        return None
    rows = _row_major(tuple(shape))
    out = []
    for s in strides:
        v = as_int(ana.simplify(s))
        if v is None:
            return None
        d = max((d for d, r in enumerate(rows) if v and v % r == 0 and v // r < shape[d]), default=None)
        if d is None:
            return None
        out.append((d, v // rows[d]))
    return out


def _indices(buf: Buffer, offset: PrimExpr, ana: Analyzer) -> list[PrimExpr]:
    rows = _row_major(tuple(as_int(d) for d in buf.shape))
    idx = []
    for d, r in enumerate(rows):
        e = offset if d == 0 else binary("%", offset, const(rows[d - 1]))
        idx.append(ana.simplify(binary("//", e, const(r))))
    return idx


def call_boxes(call: CallRoutine, buf: Buffer, ana: Analyzer) -> list[tuple[PrimExpr, ...]] | None:
    """The first and last index a tensorized call touches of buf, per argument on it (empty
    when it takes none); None where they cannot be known (a shape or stride not constant)."""
    _, args = _arguments(call)
    out = []
    for p, d, strides in args:
        if p.buffer is not buf:
            continue
        dims = _dims(buf, strides, ana)
        if dims is None:
            return None
        first = _indices(buf, p.offset, ana)
        last = list(first)
        for j, (dim, step) in enumerate(dims):
            last[dim] = ana.simplify(last[dim] + (as_int(d.shape[j]) - 1) * step)
        out += [tuple(first), tuple(last)]
    return out


def rebased(call: CallRoutine, old: Buffer, new: Buffer, lo: list[PrimExpr], ana: Analyzer) -> CallRoutine:
    """The call with its arguments on `old` moved to `new`, old's region from `lo` (compacted):
    their offsets and walked strides in new's shape, and the intrinsic's scalars recomputed from
    those strides."""
    it, args = _arguments(call)
    new_rows = _row_major(tuple(as_int(d) for d in new.shape))
    ptrs, walked = [], []
    for p, _, strides in args:
        if p.buffer is not old:
            ptrs.append(p)
            walked.append(tuple(strides))
            continue
        idx = _indices(old, p.offset, ana)
        flat = sum(((i - m) * r for i, m, r in zip(idx, lo, new_rows)), const(0))
        ptrs.append(Pointer(new, ana.simplify(flat)))
        walked.append(tuple(const(new_rows[d] * step) for d, step in _dims(old, strides, ana)))
    smap = {v: s for st, w in zip(it.strides, walked) for v, s in zip(st, w) if isinstance(v, Var)}
    role = it.call(dict(call.params)["role"])
    scalars = tuple(ana.simplify(substitute(x, smap)) for x in role.scalars)
    n_in = len(call.reads)
    return CallRoutine(call.routine, call.params, tuple(ptrs[:n_in]), tuple(ptrs[n_in:]),
                       scalars + tuple(s for w in walked for s in w))
