"""Where a GPU kernel's scratch lives: the scope of each intermediate ("global" in the loop IR)
from where it is allocated and written, as TVM infers the scope of a stage attached under bound
loops.

- inside a loop bound to threadIdx: the thread's own ("local": registers or local memory);
  (a tensorized call writes a buffer as a store does: a warp's fragments stored to a tile)
- inside a block's loops but outside its threads:
  - written inside loops bound to threadIdx (each thread its part): the block's ("shared"),
    which the sync pass then guards with barriers;
  - written outside them: every thread computes the same values, each into its own copy
    ("local"; a shared copy would be a race: one thread's first store overwriting another's
    last);
- outside every block loop, written only outside bound loops: the thread's own ("local").

Anything else (a buffer written by the threads of several blocks, or both inside and outside
thread loops) would need a barrier across blocks or threads that CUDA has not, and is a
LowerError naming the buffer.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import LowerError
from ..tir.expr import Buffer, BufferLoad
from ..tir.functor import mutate_stmt, stmt_children
from ..tir.stmt import (
    THREAD_BINDING,
    Allocate,
    BufferStore,
    CallRoutine,
    For,
    IfThenElse,
    Pointer,
    PrimFunc,
    SeqStmt,
    Stmt,
    While,
)


def infer_scopes(func: PrimFunc) -> PrimFunc:
    """func with each "global" scratch buffer made "shared" or "local" (see the module doc)."""
    body = _infer(func.body, in_block=False, in_thread=False)
    return func if body is func.body else PrimFunc(func.name, func.params, body, func.attrs)


def _infer(s: Stmt, in_block: bool, in_thread: bool) -> Stmt:
    if isinstance(s, For) and s.kind == THREAD_BINDING:
        in_block = in_block or s.thread_tag.startswith("blockIdx")
        in_thread = in_thread or s.thread_tag.startswith("threadIdx")
    if isinstance(s, Allocate) and s.buffer.scope == "global":
        scope = "local" if in_thread else _scope(s.buffer, s.body, in_block)
        s = _rescoped(s, replace(s.buffer, scope=scope))
    match s:
        case For() | Allocate() | While():
            body = _infer(s.body, in_block, in_thread)
            return s if body is s.body else replace(s, body=body)
        case SeqStmt(stmts):
            new = tuple(_infer(x, in_block, in_thread) for x in stmts)
            return s if all(a is b for a, b in zip(new, stmts)) else SeqStmt(new)
        case IfThenElse(_, then_case, else_case):
            t = _infer(then_case, in_block, in_thread)
            e = None if else_case is None else _infer(else_case, in_block, in_thread)
            return s if t is then_case and e is else_case else replace(s, then_case=t, else_case=e)
    return s


def _scope(buf: Buffer, body: Stmt, in_block: bool) -> str:
    inside, outside = _writers(body, buf)
    if inside and outside:
        raise LowerError(f"buffer {buf.name} is written both by the threads of a block and outside them; "
                         f"CUDA has no way to order those writes: compute it in one place")
    if inside and not in_block:
        raise LowerError(f"buffer {buf.name} is written by bound threads outside the loop over blocks: every "
                         f"block would write it; compute it at a loop bound to blockIdx")
    return "shared" if inside else "local"


def _writers(s: Stmt, buf: Buffer, bound: bool = False) -> tuple[bool, bool]:
    """Whether buf is stored to (or written by a tensorized call) inside a bound loop under s, and
    whether outside one."""
    if isinstance(s, BufferStore | CallRoutine):  # (a tensorized call writes through pointers)
        writes = s.buffer is buf if isinstance(s, BufferStore) else any(p.buffer is buf for p in s.writes)
        return (bound, not bound) if writes else (False, False)
    if isinstance(s, For) and s.kind == THREAD_BINDING and s.thread_tag.startswith("threadIdx"):
        bound = True
    inside = outside = False
    for c in stmt_children(s):
        i, o = _writers(c, buf, bound)
        inside, outside = inside or i, outside or o
    return inside, outside


def _rescoped(s: Allocate, new: Buffer) -> Allocate:
    old = s.buffer

    def on_expr(e):
        return BufferLoad(new, e.indices, e.dtype) if isinstance(e, BufferLoad) and e.buffer is old else None

    def on_stmt(x):
        if isinstance(x, BufferStore) and x.buffer is old:
            return BufferStore(new, x.value, x.indices)
        if isinstance(x, CallRoutine) and any(p.buffer is old for p in x.reads + x.writes):  # a tensorized call
            def moved(ps):
                return tuple(Pointer(new, p.offset) if p.buffer is old else p for p in ps)
            return replace(x, reads=moved(x.reads), writes=moved(x.writes))
        return None

    return Allocate(new, mutate_stmt(s.body, f_stmt=on_stmt, f_expr=on_expr))
