"""A CUDA block's threads: how a program's block statements spread over them.

`num_warps` warps are the block's threads: warps along threadIdx.y, their 32 lanes along
threadIdx.x (so that a warp can make a Tensor Core call together). Every block statement is a
pair of thread-bound loops in which each thread takes a strided share of the block's elements
(element e = j * threads + thread, counted along the block's innermost memory dimension, so a
warp's neighbouring lanes touch neighbouring addresses); masks stay guards on each element. The
statements' loops are separate thread-bound loops of one index, as TVM writes them, so the CUDA
target (ember.cuda) gives the kernel's intermediates their scopes (a block written by the threads
is "shared", a scalar every thread computes is the thread's own) and places `__syncthreads()`
where a shared block written by some threads is read by others; the loop-IR interpreter runs
them with GPU semantics (ember.cuda.simt), or one after another, which is the order the barriers
give. Each spread statement is marked (SPREAD) with its thread mapping, so that the kernel-time
rewrites (registers.py, accumulate.py) can tell which statements touch a block the same way.

A statement of one element writes kernel-local scalars in every thread (each its own copy, as
Triton keeps a uniform scalar in every thread), unless it writes memory, calls an atomic or reads
a tensor: then thread 0 alone runs it (a scalar store, a scalar atomic or load whose result the
others read after a barrier, so that all of them see the same value).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ....tir.expr import Buffer, BufferLoad, Call, PrimExpr, Var, const
from ....tir.expr import binary as te_binary
from ....tir.functor import stmt_exprs, visit_expr, visit_stmt
from ....tir.stmt import SYNC, THREAD_BINDING, BufferStore, Evaluate, For, IfThenElse, Stmt
from .. import values as V
from ..emitter import Body, Emitter

WARP = 32
SPREAD = "tile_spread"  # a statement spread over the threads (`_spread`): its index among them


def bound(var: Var, extent: int, tag: str, body: Stmt) -> For:
    """body over var in [0, extent), bound to the thread index `tag` ("threadIdx.x", ...)."""
    return For(var, const(0), const(extent), THREAD_BINDING, body, (("thread_tag", tag),))


class ThreadEmitter(Emitter):
    """Block statements spread over 32 * num_warps threads of a CUDA block (the module doc); the
    rest of the Emitter (reductions, tl.dot, the kernel) is CUDAEmitter's."""

    # scratch of "global" scope: ember.cuda.scopes makes it shared or the thread's own from where
    # it is written
    scratch_scope = "global"

    def __init__(self, debug: bool, num_warps: int):
        super().__init__(debug)
        self.threads = WARP * num_warps
        self.warps = num_warps
        self._spreads: list[tuple] = []  # each spread statement's (mapping, flat element, its j, steps)

    def lanes(self, dtype: str) -> int:
        return 1

    # -- loop nests ------------------------------------------------------------------------------
    def _spread(self, shape: tuple[int, ...], inner: int | None,
                body: Callable[[tuple[PrimExpr, ...]], Stmt | None]) -> Stmt | None:
        """body over shape, each thread a strided share; `inner`: the dimension consecutive
        threads walk (default: the last)."""
        total = 1
        for n in shape:
            total *= n
        inner = len(shape) - 1 if inner is None else inner
        walk = [d for d in [inner, *reversed(range(len(shape)))] if shape[d] != 1]  # fastest first
        walk = list(dict.fromkeys(walk))
        steps = -(-total // self.threads)
        j = Var("j")
        flat: list[PrimExpr] = []

        def share(t):
            e = t if steps == 1 else j * self.threads + t
            idx: list[PrimExpr] = [const(0)] * len(shape)
            rest = e
            for k, d in enumerate(walk):
                idx[d] = rest if k == len(walk) - 1 else rest % shape[d]
                rest = rest // shape[d]
            flat.append(V.flat_index(shape, tuple(idx)))
            s = body(tuple(idx))
            if s is None or steps == 1:
                return s
            if total % self.threads:
                s = IfThenElse(te_binary("<", e, const(total)), s)
            return For(j, const(0), const(steps), "serial", s)

        s = self.on_threads(min(total, self.threads), share)
        if s is None:
            return None
        self._spreads.append(((shape, tuple(walk)), flat[0], const(0) if steps == 1 else j, steps))
        return replace(s, annotations=(*s.annotations, (SPREAD, len(self._spreads) - 1)))

    def on_threads(self, count: int, make: Callable[[PrimExpr], Stmt | None]) -> Stmt | None:
        """make(t) run by threads t = 0 to count - 1 of the block: its warps along threadIdx.y,
        their lanes along threadIdx.x (t = 32 * warp + lane)."""
        ty, tx = Var("ty"), Var("tx")
        if count <= WARP:
            s = make(tx)
            return None if s is None else bound(ty, 1, "threadIdx.y", bound(tx, count, "threadIdx.x", s))
        t = ty * WARP + tx
        s = make(t)
        if s is None:
            return None
        if count % WARP:
            s = IfThenElse(te_binary("<", t, const(count)), s)
        return bound(ty, -(-count // WARP), "threadIdx.y", bound(tx, WARP, "threadIdx.x", s))

    def nest(self, shape: tuple[int, ...], body: Callable[[tuple[PrimExpr, ...]], Stmt | None], *,
             vector: bool = True, lanes: int = 16, inner: int | None = None) -> Stmt | None:
        if any(n != 1 for n in shape):
            return self._spread(shape, inner, body)
        s = body(tuple(const(0) for _ in shape))
        if s is None or not self._effects(s):
            return s  # every thread computes its own copy
        return self.on_threads(1, lambda t: s)

    def _effects(self, s: Stmt) -> bool:
        """Whether s writes memory other than the kernel's scratch, calls an atomic, or reads a
        tensor (whose element another thread may change meanwhile: a count behind a lock, read
        once so that every thread takes the same branch on it)."""
        found = []
        local = set(self.allocs)

        def on_expr(e):
            if isinstance(e, Call) and e.name.startswith("atomic_") or isinstance(e, BufferLoad) \
                    and e.buffer in self.tensors:
                found.append(e)

        def on_stmt(x):
            if isinstance(x, BufferStore) and x.buffer not in local:
                found.append(x)
            for e in stmt_exprs(x):
                visit_expr(e, on_expr)

        visit_stmt(s, on_stmt)
        return bool(found)

    def versioned(self, shape: tuple[int, ...], body: Body, lanes: int, inner: int | None = None,
                  fast_nest: Callable | None = None) -> None:
        """One nest with every mask a guard: a GPU thread tests its own elements."""
        saved = self.masks, self.full
        try:
            self.masks, self.full = [], False
            s = self.nest(shape, lambda idx: body(idx, False), inner=inner)
        finally:
            self.masks, self.full = saved
        self.emit(s)

    # -- a thread's own scalars, barriers ----------------------------------------------------------
    def register(self, hint: str, dtype: str) -> tuple[Buffer, tuple[PrimExpr], BufferLoad]:
        """A scalar of the thread's own (allocated inside its thread loop): the buffer, its index
        and its value. A fold keeps its running value there, so that no loop of a thread writes
        shared memory it reads (which would need a barrier inside a loop not every thread runs)."""
        buf = Buffer(self.name(hint), (const(1),), dtype, scope="global")
        return buf, (const(0),), BufferLoad(buf, (const(0),), dtype)

    def barrier(self) -> None:
        """`__syncthreads()`: what the threads wrote to memory (global too: the sync pass places
        barriers for shared memory only) is seen by all of them after it."""
        self.emit(Evaluate(Call(SYNC, (), "int32")))
