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
            allocs, inner = [], s.body
            while isinstance(inner, Allocate):
                allocs.append(inner.buffer)
                inner = inner.body
            half = {b: Buffer(b.name, (const(2), *b.shape), b.dtype, b.scope) for b in allocs if memory_of(b.scope)}
            doubled.extend(half.values())
            if not half:
                raise ScheduleError(f"loop {s.loop_var.name} is marked double_buffer but stages no device tile; "
                                    f"compute the cache_read stages at it")
            which = (s.loop_var - s.min) % 2

            def moved(p: Pointer) -> Pointer:
                b = half.get(p.buffer)
                return p if b is None else Pointer(b, simplify(p.offset + which * elements(p.buffer)))

            def on_stmt(x):
                if isinstance(x, CallRoutine):
                    return replace(x, reads=tuple(map(moved, x.reads)), writes=tuple(map(moved, x.writes)))
                return None

            body = mutate_stmt(double_buffer(inner, doubled), f_stmt=on_stmt)
            for b in reversed(allocs):
                body = Allocate(half.get(b, b), body)
            return For(s.loop_var, s.min, s.extent, s.kind, body, s.annotations)
        case For():
            return replace(s, body=double_buffer(s.body, doubled))
        case SeqStmt(stmts):
            return seq(*(double_buffer(x, doubled) for x in stmts))
        case Allocate(buf, body):
            return Allocate(buf, double_buffer(body, doubled))
        case IfThenElse(c, t, e):
            return IfThenElse(c, double_buffer(t, doubled), None if e is None else double_buffer(e, doubled))
    return s
