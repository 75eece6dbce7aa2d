"""A CUDA block's threads: how a program's block statements spread over them.

`num_warps` warps are the block's threads: warps along threadIdx.y, their 32 lanes along
threadIdx.x (so that a warp can make a Tensor Core call together). Every block statement is a
pair of thread-bound loops in which each thread takes a strided share of the block's elements
(element e = j * threads + thread, counted along the block's innermost memory dimension, so a
warp's neighbouring lanes touch neighbouring addresses), in chunks of LANES consecutive elements
(e = (j * threads + thread) * LANES + lane) where every thread takes whole chunks; masks stay
guards on each element, and a chunk whose masks all hold and whose accesses start at multiples of
LANES is 16-byte loads and stores of the aligned tensors of 4-byte elements (ember.cuda.vectors). The
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

from ....cuda.vectors import vector_lanes
from ....target import WARP
from ....tir.arith import Analyzer
from ....tir.arith_bound import modular_set
from ....tir.expr import Buffer, BufferLoad, Call, PrimExpr, Var, all_, const
from ....tir.expr import binary as te_binary
from ....tir.expr_functor import substitute
from ....tir.functor import mutate_stmt, stmt_exprs, visit_expr, visit_stmt
from ....tir.stmt import SYNC, THREAD_BINDING, BufferStore, Evaluate, For, IfThenElse, Stmt
from ....tir.structural import structural_key
from .. import values as V
from ..affine import all_true
from ..emitter import Body, Emitter

LANES = 4  # a thread's consecutive elements of a block statement, where the block's shape allows (`chunk`)
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
        self._bodies: dict[int, Body] = {}  # a versioned nest's body, by its SPREAD mark (epilogue.py builds it anew)

    def lanes(self, dtype: str) -> int:
        return 1

    # -- loop nests ------------------------------------------------------------------------------
    def chunk(self, total: int, inner_extent: int) -> int:
        """How many consecutive elements of a block statement each thread takes at a time: LANES
        where every thread takes whole chunks along the innermost dimension (16 bytes of float32
        a load or store, ember.cuda.vectors), else 1."""
        return LANES if inner_extent % LANES == 0 and total % (self.threads * LANES) == 0 else 1

    def _spread(self, shape: tuple[int, ...], inner: int | None,
                body: Callable[[tuple[PrimExpr, ...]], Stmt | None], lanes: Callable | None = None) -> Stmt | None:
        """body over shape, each thread a strided share of chunks of consecutive elements (`chunk`);
        `inner`: the dimension consecutive threads walk (default: the last); `lanes(idx, v, n)`:
        the statement of a chunk of n elements, idx's at lane v (default: body over the lanes,
        `_lanes_of`)."""
        total = 1
        for n in shape:
            total *= n
        inner = len(shape) - 1 if inner is None else inner
        walk = [d for d in [inner, *reversed(range(len(shape)))] if shape[d] != 1]  # fastest first
        walk = list(dict.fromkeys(walk))
        vec = self.chunk(total, shape[walk[0]])
        steps = -(-total // (self.threads * vec))
        j, v = Var("j"), Var("v")
        flat: list[PrimExpr] = []

        def share(t):
            q = t if steps == 1 else j * self.threads + t
            idx: list[PrimExpr] = [const(0)] * len(shape)
            rest = q if vec == 1 else q * vec  # (a chunk's first element: its lanes stay in its row)
            for k, d in enumerate(walk):
                idx[d] = rest if k == len(walk) - 1 else rest % shape[d]
                rest = rest // shape[d]
            if vec > 1:  # lane v at its row's index + v: affine in v, so a chunk's masks hold at its corners
                idx[walk[0]] = idx[walk[0]] + v
            flat.append(V.flat_index(shape, tuple(idx)))
            if vec == 1:
                s = body(tuple(idx))
            else:
                s = lanes(tuple(idx), v, vec) if lanes is not None else self._lanes_of(body(tuple(idx)), v, vec)
            if s is None or steps == 1:
                return s
            if total % self.threads:
                s = IfThenElse(te_binary("<", q, const(total)), s)
            return For(j, const(0), const(steps), "serial", s)

        s = self.on_threads(min(total // vec, self.threads), share)
        if s is None:
            return None
        own = j if vec == 1 else j * vec + v if steps > 1 else v  # (the thread's element: its slot)
        self._spreads.append(((shape, tuple(walk), vec), flat[0], const(0) if vec == steps == 1 else own,
                              steps * vec))
        return replace(s, annotations=(*s.annotations, (SPREAD, len(self._spreads) - 1)))

    def _lanes_of(self, s: Stmt | None, v: Var, n: int) -> Stmt | None:
        """s over the lanes v of a chunk of n elements: a vectorized loop (16-byte accesses where
        ember.cuda.vectors can prove them) when every tensor it reads or writes at lane-dependent
        places is 16-byte aligned (the specialization says so), else unrolled."""
        if s is None:
            return None
        found = []

        def on_stmt(x):
            if isinstance(x, BufferStore) and x.buffer in self.tensors and x.buffer not in self.aligned:
                found.append(x)
            for e in stmt_exprs(x):
                visit_expr(e, lambda y: found.append(y) if isinstance(y, BufferLoad) and y.buffer in self.tensors
                           and y.buffer not in self.aligned else None)

        visit_stmt(s, on_stmt)
        return For(v, const(0), const(n), "unrolled" if found else "vectorized", s)

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
             vector: bool = True, lanes: int = 16, inner: int | None = None, chunks: Callable | None = None
             ) -> Stmt | None:
        if any(n != 1 for n in shape):
            return self._spread(shape, inner, body, chunks)
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
        """One nest with every mask a guard: a GPU thread tests its own elements; a chunk of its
        consecutive elements (`chunk`) whose masks all hold runs unmasked (`_versioned_chunk`)."""
        saved = self.masks, self.full
        try:
            self.masks, self.full = [], False
            s = self.nest(shape, lambda idx: body(idx, False), inner=inner,
                          chunks=lambda idx, v, n: self._versioned_chunk(body, idx, v, n))
        finally:
            self.masks, self.full = saved
        if s is not None and s.annotation(SPREAD) is not None:
            self._bodies[s.annotation(SPREAD)] = body
        self.emit(s)

    def _versioned_chunk(self, body: Body, idx: tuple[PrimExpr, ...], v: Var, n: int) -> Stmt | None:
        """A chunk of n elements (idx's at lane v): under one test that every lane's masks hold
        (affine.all_true) and that its accesses' offsets are multiples of n (`_aligned_lanes`),
        the unmasked body over the lanes (`_lanes_of`: 16-byte accesses); else, or where no such
        test is found, each lane under its masks."""
        self.masks = []
        slow = body(idx, False)
        masks, self.masks = self.masks, []
        if slow is None:
            return None
        each = For(v, const(0), const(n), "unrolled", slow)
        full = None if self.debug else all_true(masks, {v: n}) if masks else const(True, "bool")
        if full is None:
            return each
        fast = slow
        if masks:
            self.masks, self.full = None, True
            try:
                fast = body(idx, True)
            finally:
                self.masks, self.full = [], False
        fast, tests = self._aligned_lanes(fast, v, n)
        conds = [full] * bool(masks) + tests
        return IfThenElse(all_(*conds), self._lanes_of(fast, v, n), each) if conds else self._lanes_of(fast, v, n)

    def _aligned_lanes(self, s: Stmt, v: Var, n: int) -> tuple[Stmt, list[PrimExpr]]:
        """s with each access to a 16-byte aligned tensor whose n elements are one access
        (ember.cuda.vectors.vector_lanes: 4 of 4 bytes; 2 of a pair store's type) at `base + v`,
        base not known to be a multiple of n (a row's start, `row * stride`), made at `base // n *
        n + v`; and the tests that those bases are multiples of n (where the two are the same
        place), as copies.py's operand copies test theirs."""
        ana, tests = Analyzer(), {}

        def moved(buf: Buffer, indices: tuple) -> tuple | None:
            if buf not in self.aligned or not vector_lanes(buf.dtype, n) or len(indices) != 1:
                return None
            base = ana.simplify(substitute(indices[0], {v: const(0, v.dtype)}))
            m, r = modular_set(base, {})
            if not ana.can_prove_equal(indices[0] - base, v) or m % n == 0 and r % n == 0:
                return None
            tests.setdefault(structural_key(base), te_binary("==", base % n, const(0, base.dtype)))
            return (base // n * n + v,)

        def on_expr(e):
            if isinstance(e, BufferLoad) and (at := moved(e.buffer, e.indices)) is not None:
                return BufferLoad(e.buffer, at, e.dtype)
            return None

        def on_stmt(x):
            if isinstance(x, BufferStore) and (at := moved(x.buffer, x.indices)) is not None:
                return BufferStore(x.buffer, x.value, at)
            return None

        return mutate_stmt(s, f_stmt=on_stmt, f_expr=on_expr), list(tests.values())

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
