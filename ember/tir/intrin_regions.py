"""What a tensorized call (ember.tir.schedule.tensorize) touches of a buffer, as indices, and the
call moved onto a compacted copy of that buffer: what compact_buffers needs to shrink a shared
tile or a register tile that only tensorized calls read or write.

A call names each argument by a flat, row-major offset and the strides it walks along each of
its intrinsic's dimensions (the call's trailing scalars). The offset's indices are the pointer's
where its maker kept them (tensorize does: a shared tile of a product padded to whole tiles of a
symbolic size has symbolic strides, before compaction); else, for a buffer whose dimensions after
the first are constant, the offset splits back into one index per dimension,
`(offset % stride[d-1]) // stride[d]`, which
the analyzer reduces to the affine indices it was built from; the call touches the box from
those indices, `(extent - 1) * step + 1` long in each dimension it walks (its description's
extent; the step 1, or the group's size where one dimension is walked in several of the
description's: a row of K bytes as K / 4 groups of 4) and one in the others.
"""

from __future__ import annotations

from .arith import Analyzer
from .expr import Buffer, PrimExpr, Var, as_int, binary, const
from .functor import free_vars, substitute
from .stmt import CallRoutine, Pointer
from .tensor_intrin import get_intrin


def is_tensorized(call: CallRoutine) -> bool:
    return "intrin" in dict(call.params)


def _row_major(buf: Buffer) -> list[PrimExpr]:
    """The buffer's row-major strides (expressions of its sizes where they are symbolic)."""
    out, acc = [], const(1)
    for d in reversed(buf.shape[1:]):
        out.append(acc)
        acc = acc * d
    out.append(acc)
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
    dimension (more than 1 where a dimension is walked in groups: K in groups of 4): the innermost
    dimension whose stride divides it into a constant step that stays inside a constant extent;
    None where a stride is not such a multiple of any."""
    shape = [as_int(d) for d in buf.shape]
    rows = _row_major(buf)
    out = []
    for s in strides:
        s = ana.simplify(s)
        found = None
        for d in reversed(range(len(rows))):
            step = _ratio(s, rows[d], ana)
            if step is not None and (shape[d] is None or step < shape[d]):
                found = (d, step)
                break
        if found is None:
            return None
        out.append(found)
    return out


def _ratio(a: PrimExpr, b: PrimExpr, ana: Analyzer) -> int | None:
    """The positive integer a / b, where it is one whatever the sizes (b may be symbolic: a guess at
    sample sizes, then proven), else None."""
    sample = {v: const(4099, v.dtype) for v in (*free_vars(a), *free_vars(b))}
    x, y = (as_int(ana.simplify(substitute(e, sample))) for e in (a, b))
    if x is None or not y or x % y or x // y < 1:
        return None
    return x // y if ana.can_prove_equal(b * (x // y), a) else None


def _indices(buf: Buffer, p: Pointer, ana: Analyzer) -> list[PrimExpr] | None:
    """p's element of buf as one index per dimension; None where p keeps none and buf's strides
    are not constant."""
    if p.indices is not None:
        return [ana.simplify(i) for i in p.indices]
    rows = [as_int(r) for r in _row_major(buf)]
    if None in rows:
        return None
    idx = []
    for d, r in enumerate(rows):
        e = p.offset if d == 0 else binary("%", p.offset, const(rows[d - 1]))
        idx.append(ana.simplify(binary("//", e, const(r))))
    return idx


def call_boxes(call: CallRoutine, buf: Buffer, ana: Analyzer) -> list[tuple[PrimExpr, ...]] | None:
    """The first and last index a tensorized call touches of buf, per argument on it (empty
    when it takes none); None where they cannot be known (`_dims`, `_indices`)."""
    _, args = _arguments(call)
    out = []
    for p, d, strides in args:
        if p.buffer is not buf:
            continue
        dims, first = _dims(buf, strides, ana), _indices(buf, p, ana)
        if dims is None or first is None:
            return None
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
    new_rows = _row_major(new)
    ptrs, walked = [], []
    for p, _, strides in args:
        if p.buffer is not old:
            ptrs.append(p)
            walked.append(tuple(strides))
            continue
        idx = [ana.simplify(i - m) for i, m in zip(_indices(old, p, ana), lo)]
        flat = sum((i * r for i, r in zip(idx, new_rows)), const(0))
        ptrs.append(Pointer(new, ana.simplify(flat), tuple(idx)))
        walked.append(tuple(ana.simplify(new_rows[d] * step) for d, step in _dims(old, strides, ana)))
    smap = {v: s for st, w in zip(it.strides, walked) for v, s in zip(st, w) if isinstance(v, Var)}
    role = it.call(dict(call.params)["role"])
    scalars = tuple(ana.simplify(substitute(x, smap)) for x in role.scalars)
    n_in = len(call.reads)
    return CallRoutine(call.routine, call.params, tuple(ptrs[:n_in]), tuple(ptrs[n_in:]),
                       scalars + tuple(s for w in walked for s in w))
