"""Computed copies of a pipelined loop staged in registers (ember.cuda.pipeline).

A tile whose elements are computed as they are copied (a convolution's columns, im2col: each
element an address, a bounds test and a conversion; ember.ops.conv_gemm) cannot be a cp.async:
its thread loads each element, then stores it into shared memory, and the store waits for the
load. Written where the pipeline writes its copies, before this iteration's products, every thread
waits there for its global loads (hundreds of cycles) at every step of K, which nothing hides where
a multiprocessor holds two or three warps (a batch-1 convolution's grid: ResNet-18's 3x3 layers
ran 168-200 blocks of two warps on 132 SMs, 24-48 steps of K each). Split in two, the loads issued into
the thread's registers before the products and the stores into shared memory after them, the
loads are in flight while the Tensor Cores run (CUTLASS's register-staged global loads, its
pre-Ampere mainloop):

    for q in ...:  X[i] = f(x[...])          R = alloc (local)
                                     ->      for q in ...:  R[q'] = f(x[...])      (before the products)
                                             ...products from another stage...
                                             for q in ...:  X[i] = R[q']           (after them)

q' the copy's own loops (all but those bound to threads) linearized, unrolled so that R stays
in registers. The stores go to the stage the products of this iteration do not read (the one the
next S - 1 iterations' copies fill), past the loop's barrier, so no barrier moves. Only a copy of
one scalar store into shared memory that no cp.async makes (a computed element, or a 2-byte one
outside a 16-byte copy: the copies that are cp.async keep their place, ember.cuda.vectors.
async_copy), and whose loops have constant extents, is split.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from ..tir import dtype as dt
from ..tir.expr import Buffer, BufferLoad, Const, PrimExpr, as_int, binary
from ..tir.functor import collect, stmt_children
from ..tir.stmt import THREAD_BINDING, BufferStore, For, IfThenElse, Stmt
from .vectors import async_copy, zero_filled

MAX_REGISTERS = 32  # elements a thread holds across the products at most (registers it keeps live)
STAGED = True  # off: computed copies stay where the pipeline puts them (benchmarks/product_configs.py times both)


def computed(s: Stmt) -> bool:
    """s copies into shared memory elements that no cp.async copies (and STAGED is on):
    computed ones, or loads of 2-byte elements that no 16-byte copy takes (a gather of NCHW
    columns, whose lanes are neither contiguous nor all inside or all in the padding)."""
    if not STAGED:
        return False
    return _waited(s)


def _waited(s: Stmt) -> bool:
    """s stores into shared memory an element that is no 4-byte load of global memory, outside
    16-byte copies."""
    if isinstance(s, For) and s.kind == "vectorized" and async_copy(s) is not None:
        return False
    if isinstance(s, BufferStore):
        return s.buffer.scope == "shared" and dt.lanes_of(s.value.dtype) == 1 and (
            not _plain_load(s.value) or dt.bits(s.buffer.dtype) != 32)
    return any(_waited(x) for x in stmt_children(s))


def _plain_load(value: PrimExpr) -> bool:
    _, load = zero_filled(value)
    return isinstance(load, BufferLoad) and load.buffer.scope == "global"


def split(s: Stmt, name: str) -> tuple[Buffer, Stmt, Stmt] | None:
    """(R, the loads into R, the stores from R) of the copy s (see the module doc), or None where
    s is not one store under loops and conditions, its loops' extents not constant, or it would
    hold more than MAX_REGISTERS elements."""
    stores = collect(s, lambda x: isinstance(x, BufferStore))
    if len(stores) != 1:
        return None
    loops = [x for x in collect(s, lambda x: isinstance(x, For)) if x.kind != THREAD_BINDING]
    extents = [as_int(x.extent) for x in loops]
    if None in extents or any(as_int(x.min) is None for x in loops) or prod(extents) > MAX_REGISTERS:
        return None
    index: PrimExpr | None = None
    for loop, n in zip(loops, extents):
        at = binary("-", loop.loop_var, loop.min) if as_int(loop.min) else loop.loop_var
        index = at if index is None else binary("+", binary("*", index, Const(n, at.dtype)), at)
    index = Const(0, "int32") if index is None else index
    (store,) = stores
    regs = Buffer(f"{name}_regs", (Const(prod(extents), "int64"),), store.buffer.dtype, "local")
    loads = _rebuilt(s, lambda st: BufferStore(regs, st.value, (index,)))
    saves = _rebuilt(s, lambda st: replace(st, value=BufferLoad(regs, (index,), regs.dtype)))
    return (regs, loads, saves) if loads is not None and saves is not None else None


def _rebuilt(s: Stmt, on_store) -> Stmt | None:
    """s with its store rewritten by on_store and its own loops unrolled; None for another kind
    of statement in the nest."""
    match s:
        case BufferStore():
            return on_store(s)
        case For():
            body = _rebuilt(s.body, on_store)
            kind = s.kind if s.kind == THREAD_BINDING else "unrolled"
            return None if body is None else replace(s, body=body, kind=kind)
        case IfThenElse(else_case=None):
            then = _rebuilt(s.then_case, on_store)
            return None if then is None else replace(s, then_case=then)
    return None
