"""Double buffering on the device: `s[CL].pragma(ko, "double_buffer")` holds the tiles that
loop stages twice (see `double_buffer`)."""

from __future__ import annotations

from dataclasses import replace

from ..errors import ScheduleError
from ..tir.arith import simplify
from ..tir.expr import Buffer, const
from ..tir.functor import mutate_stmt
from ..tir.stmt import Allocate, CallRoutine, For, IfThenElse, Pointer, SeqStmt, Stmt, seq
from .memories import elements
from .spec import memory_of

DOUBLE_BUFFER = "pragma_double_buffer"  # s[CL].pragma(ko, "double_buffer"): ko's input tiles, twice
DOUBLED = "accel_doubled"  # the function's attribute: its device tiles held twice


def double_buffer(s: Stmt, doubled: list) -> Stmt:
    """The device tiles a loop marked double_buffer allocates, twice: iteration i uses half i % 2,
    so the DMA fills one half while the GEMMs read the other (VTA's virtual threads do this by
    interleaving two threads' instructions). Each half is a slot of its own (ember.accel.codegen)."""
    match s:
        case For() if dict(s.annotations).get(DOUBLE_BUFFER):
            body = double_buffer(s.body, doubled)
            half = {b: Buffer(b.name, (const(2), *b.shape), b.dtype, b.scope) for b in _per_iteration(body)}
            if not half:
                raise ScheduleError(f"loop {s.loop_var.name} is marked double_buffer but stages no device tile; "
                                    f"compute the cache_read stages at it")
            doubled.extend(half.values())
            which = (s.loop_var - s.min) % 2

            def moved(p: Pointer) -> Pointer:
                b = half.get(p.buffer)
                return p if b is None else Pointer(b, simplify(p.offset + which * elements(p.buffer)))

            def on_stmt(x):
                if isinstance(x, CallRoutine):
                    return replace(x, reads=tuple(map(moved, x.reads)), writes=tuple(map(moved, x.writes)))
                if isinstance(x, Allocate) and x.buffer in half:
                    return Allocate(half[x.buffer], x.body)
                return None

            return replace(s, body=mutate_stmt(body, f_stmt=on_stmt))
        case For():
            return replace(s, body=double_buffer(s.body, doubled))
        case SeqStmt(stmts):
            return seq(*(double_buffer(x, doubled) for x in stmts))
        case Allocate(buf, body):
            return Allocate(buf, double_buffer(body, doubled))
        case IfThenElse(c, t, e):
            return IfThenElse(c, double_buffer(t, doubled), None if e is None else double_buffer(e, doubled))
    return s


def _per_iteration(s: Stmt) -> list[Buffer]:
    """The device tiles allocated once per iteration of the loop whose body is `s` (not in an
    inner loop)."""
    match s:
        case Allocate(buf, body):
            return ([buf] if memory_of(buf.scope) else []) + _per_iteration(body)
        case SeqStmt(stmts):
            return [b for x in stmts for b in _per_iteration(x)]
        case IfThenElse(_, t, e):
            return _per_iteration(t) + (_per_iteration(e) if e is not None else [])
    return []
