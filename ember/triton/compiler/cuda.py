"""The GPU's Emitter: a program is a CUDA block, its block operations spread over the block's threads.

The loop over programs is bound to blockIdx.x (the flattened grid), and `num_warps` warps are the
block's threads: warps along threadIdx.y, their 32 lanes along threadIdx.x (so that a warp can
make a Tensor Core call together). Every block statement is a pair of thread-bound loops in
which each thread takes a strided share of the block's elements (element e = j * threads +
thread, counted along the block's innermost memory dimension, so a warp's neighbouring lanes
touch neighbouring addresses); masks stay guards on each element. The statements' loops are separate
thread-bound loops of one index, as TVM writes them, so the CUDA target (ember.cuda) gives the
kernel's intermediates their scopes (a block written by the threads is "shared", a scalar every
thread computes is the thread's own) and places `__syncthreads()` where a shared block written by
some threads is read by others; the loop-IR interpreter runs them with GPU semantics
(ember.cuda.simt), or one after another, which is the order the barriers give.

A block read in for a Tensor Core dot whose tensor is 16-byte aligned (the specialization says
so) and walked along the block's last dimension is copied 16 bytes a thread at a time where a
vector's offset allows and its masks hold, element by element elsewhere (`_vector_read`); a
dot's operand that only dots read has its rows padded by 16 bytes against bank conflicts
(`_vector_operands`).

A block that only statements spreading its shape the same way touch, each thread at its own
elements alone (a load read in for an elementwise consumer, vector add's operands, a softmax row
read by the max's partials, its exponentials by the sum's and the division), is held by each
thread in registers, its elements j = 0, 1, ... in a local array: global memory to registers and
back with no shared block and no barrier, as Triton's blocked layouts keep them (`_thread_own`).
Any other block a statement's threads write is shared.

A statement of one element writes kernel-local scalars in every thread (each its own copy, as
Triton keeps a uniform scalar in every thread), unless it writes memory, calls an atomic or reads
a tensor: then thread 0 alone runs it (a scalar store, a scalar atomic or load whose result the
others read after a barrier, so that all of them see the same value). A reduction to a scalar is
two phases: each thread folds its share into a shared partial, then every thread folds the
partials (which the CUDA target turns into warp shuffles, ember.cuda.warp, in a block of one
warp); a reduction keeping other axes gives each output element to one thread, as do
scans and arg-reductions; a fold keeps its running value in the thread's register, so no barrier
falls in a loop only some threads run. `tl.dot` on the Tensor Cores: float16 and bfloat16
blocks, and float32 ones as TF32 where Triton's `input_precision` says "tf32" (its default;
`allow_tf32=False`, "ieee" and "tf32x3" keep float32), when the sizes are multiples of 16: the
operands stay in their type in shared memory and the warps are a grid over the output's 16x16
tiles (Triton's warpsPerCTA), each warp a contiguous block of fm x fn of them, the grid chosen
for the fewest fragment loads (fm + fn); one call per 16 of k updates the warp's whole block, each
fragment of A and of B loaded once (ember.intrinsics.wmma.warp_mma; TF32 a call per tile; where
no grid of the warps divides the tiles, each warp a strided share of them). A dot loads its
warp's tiles of the accumulator from shared memory into fragments, multiplies into them over all
of k and stores them back once. In a loop whose dots are the only accesses to their accumulator
(Triton's `acc = tl.dot(a, b, acc)` over K), each warp keeps those fragments in registers for the
whole loop: loaded once before it, multiplied into by each step, stored back once after it;
`acc += tl.dot(a, b)` is first folded into a dot into acc, as Triton does. wmma rather than mma.sync:
the fragments' layout across the lanes is the compiler's, and the same calls serve fp16, bf16 and
TF32 without per-shape register bookkeeping (ember.intrinsics.wmma's module doc). Any other
`tl.dot` gives each thread a strided share of the output tile on CUDA cores, each element summed
over k in a register.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ...cuda import fragments
from ...intrinsics.wmma import LOAD, MMA, STORE, warp_mma
from ...intrinsics.wmma import ZERO as ZERO_FRAGMENT
from ...tir import dtype as dt
from ...tir.arith import Analyzer
from ...tir.expr import Buffer, BufferLoad, Call, Cast, PrimExpr, Var, as_int, const, select
from ...tir.expr import binary as te_binary
from ...tir.expr_functor import substitute
from ...tir.functor import collect, mutate_stmt, stmt_exprs, visit_expr, visit_stmt
from ...tir.stmt import (
    SYNC,
    THREAD_BINDING,
    Allocate,
    BufferStore,
    CallRoutine,
    Evaluate,
    For,
    IfThenElse,
    Pointer,
    SeqStmt,
    Stmt,
    seq,
)
from ...tir.structural import structural_key
from ..language import dtypes as tld
from . import values as V
from .affine import drop_wraps, linear
from .emitter import Body, Deferred, Emitter, buffer_block, buffer_value

WARP = 32
TILE = 16  # a Tensor Core product's tile: 16x16x16
DOT = "tile_dot"  # a Tensor Core dot's statement: its index among the Emitter's dots
COPY = "tile_dot_copy"  # a Tensor Core dot's load (or fill) and store of its fragments: the dot's index
ZERO = "tile_dot_zero"  # a dot's fragments filled with zeros rather than loaded
SPREAD = "tile_spread"  # a statement spread over the threads (`_spread`): its index among them
_NOP = Evaluate(const(0, "int32"))


def _params(intrin, role: str, reads: tuple, writes: tuple, scalars: int) -> tuple:
    """A tensorized call's parameters (ember.tir.schedule.tensorize's): which of its pointers and
    how many of its scalars the C call takes."""
    return (("intrin", intrin.name), ("role", role), ("c_reads", reads), ("c_writes", writes),
            ("c_scalars", scalars))


def _replaced(s: Stmt, table: dict[Stmt, Stmt]) -> Stmt:
    """s with each statement of the table (the very object) replaced by its value."""
    return mutate_stmt(s, f_stmt=lambda x: table.get(x))


def _in_turn(body: Stmt, dot: Stmt, add: Stmt, acc: Buffer) -> bool:
    """Whether dot and add are statements of one sequence, in this order, with none between them
    touching acc (the dot may then write acc where add did)."""
    for block in collect(body, lambda x: isinstance(x, SeqStmt) and any(y is dot for y in x.stmts)):
        at = {id(y): i for i, y in enumerate(block.stmts)}
        j, k = at[id(dot)], at.get(id(add))
        return k is not None and j < k and not any(_touches(y, acc) for y in block.stmts[j + 1:k])
    return False


def _padded(s: Stmt, buf: Buffer, into: Buffer, cols: int, pad: int) -> Stmt | None:
    """s reading or writing `into` where it read or wrote `buf` (rows of `cols`), whose rows are
    `cols + pad` apart: a store's index moved to its row's new start; a Tensor Core call's
    pointers too, and their row strides (the call's i-th scalar for its i-th pointer, as wmma's
    calls take lda and ldb, and the i-th pair of strides after them, which the interpreter reads)
    widened; None for any other statement."""
    if isinstance(s, BufferStore) and s.buffer is buf:
        i = s.indices[0]
        return BufferStore(into, s.value, (Analyzer().simplify(i + i // cols * pad),))
    if not isinstance(s, CallRoutine) or not any(q.buffer is buf for q in s.reads):
        return None
    reads, scalars = list(s.reads), list(s.scalars)
    first = dict(s.params)["c_scalars"]
    for i, q in enumerate(s.reads):
        if q.buffer is buf:
            reads[i] = Pointer(into, q.offset + q.offset // cols * pad)
            scalars[i] = scalars[first + 2 * i] = const(cols + pad)
    return replace(s, reads=tuple(reads), scalars=tuple(scalars))


def _touches(s: Stmt, buf: Buffer) -> bool:
    """Whether s reads or writes buf (a tensorized call through its pointers)."""
    found = []

    def on_stmt(x):
        if isinstance(x, BufferStore) and x.buffer is buf or isinstance(x, CallRoutine) and any(
                p.buffer is buf for p in x.reads + x.writes):
            found.append(x)
        for e in stmt_exprs(x):
            visit_expr(e, lambda y: found.append(y) if isinstance(y, BufferLoad) and y.buffer is buf else None)

    visit_stmt(s, on_stmt)
    return bool(found)


def bound(var: Var, extent: int, tag: str, body: Stmt) -> For:
    return For(var, const(0), const(extent), THREAD_BINDING, body, (("thread_tag", tag),))


class CUDAEmitter(Emitter):
    """Block operations spread over 32 * num_warps threads of a CUDA block (the module doc)."""

    # scratch of "global" scope: ember.cuda.scopes makes it shared or the thread's own from where
    # it is written
    scratch_scope = "global"

    def __init__(self, target, debug: bool, num_warps: int = 4):
        super().__init__(debug)
        self.threads = WARP * num_warps
        self.warps = num_warps
        self._dots: list[tuple] = []  # each Tensor Core dot's (a, b, c, m, n, k), by its DOT mark
        self._frags: dict[int, Buffer] = {}  # each Tensor Core dot's own fragments of c, by its DOT mark
        self._read_ins: dict[Buffer, tuple[Deferred, Stmt]] = {}  # each block read in: its load, its statement
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

    # -- reductions --------------------------------------------------------------------------------
    def reduce(self, x: V.Block, axis: int, combine: Callable, init: PrimExpr, dtype) -> V.Block | V.Scalar:
        tdtype = V.tir_dtype(dtype)
        shape = x.shape
        out_shape = shape[:axis] + shape[axis + 1:]

        def value(idx):
            return V.convert(V.element(x, idx), x.dtype, dtype)

        if not out_shape:
            return self._reduce_all(shape[0], value, combine, init, dtype)
        out = self.local("r", out_shape, tdtype)
        self.emit(self.nest(out_shape, lambda o: self._line(out, out_shape, o, axis, shape[axis], value, combine,
                                                            init)))
        return buffer_block(out, out_shape, dtype)

    def register(self, hint: str, dtype: str) -> tuple[Buffer, tuple[PrimExpr], BufferLoad]:
        """A scalar of the thread's own (allocated inside its thread loop): the buffer, its index
        and its value. A fold keeps its running value there, so that no loop of a thread writes
        shared memory it reads (which would need a barrier inside a loop not every thread runs)."""
        buf = Buffer(self.name(hint), (const(1),), dtype, scope="global")
        return buf, (const(0),), BufferLoad(buf, (const(0),), dtype)

    def _line(self, out: Buffer, out_shape, o, axis: int, n: int, value, combine, init) -> Stmt:
        """out[o] = the fold of value along axis, in one thread. Along the last axis each thread
        starts at its own place in the line (element o % n, then on around it): the threads' lines
        are rows of a shared block n apart, which walked in step would all fall in one bank
        (attention's row max and sum: a 32-way conflict at every element)."""
        k = Var("k")
        acc, at, now = self.register("a", out.dtype)
        at_k = k
        if axis == len(out_shape) and n > 1:
            shifted = k + V.flat_index(out_shape, o) % n
            at_k = select(te_binary("<", shifted, const(n)), shifted, shifted - n)
        step = BufferStore(acc, combine(now, value((*o[:axis], at_k, *o[axis:]))), at)
        return Allocate(acc, seq(BufferStore(acc, init, at), For(k, const(0), const(n), "serial", step),
                                 BufferStore(out, now, (V.flat_index(out_shape, o),))))

    def _reduce_all(self, n: int, value, combine, init, dtype) -> V.Scalar:
        """A 1-D block to a scalar: a partial per thread (shared), then every thread folds them."""
        tdtype = V.tir_dtype(dtype)
        width = min(n, self.threads)
        part = self.local("p", (width,), tdtype)
        out = self.local("r", (), tdtype)
        j, r = Var("j"), Var("r")
        acc, at, now = self.register("a", tdtype)
        steps = -(-n // width)
        flat: list[PrimExpr] = []

        def share(t):
            e = t if steps == 1 else j * width + t  # (a 1-D block's elements as `_spread` gives them)
            flat.append(V.flat_index((n,), (e,)))
            step = BufferStore(acc, combine(now, value((e,))), at)
            if n % width:
                step = IfThenElse(te_binary("<", e, const(n)), step)
            fold = step if steps == 1 else For(j, const(0), const(steps), "serial", step)
            return Allocate(acc, seq(BufferStore(acc, init, at), fold, BufferStore(part, now, (t,))))

        first = self.on_threads(width, share)
        self._spreads.append((((n,), (0,)), flat[0], const(0) if steps == 1 else j, steps))
        self.emit(replace(first, annotations=(*first.annotations, (SPREAD, len(self._spreads) - 1))))
        fold = BufferStore(out, combine(BufferLoad(out, (const(0),), tdtype), BufferLoad(part, (r,), tdtype)),
                           (const(0),))
        self.emit(seq(BufferStore(out, init, (const(0),)), For(r, const(0), const(width), "serial", fold)))
        return V.Scalar(BufferLoad(out, (const(0),), tdtype), dtype)

    def arg_reduce(self, x: V.Block, axis: int, better: Callable, init: PrimExpr, index_dtype):
        """Each output element in one thread, a serial scan of its line (the first best index)."""
        tdtype = V.tir_dtype(x.dtype)
        shape = x.shape
        out_shape = shape[:axis] + shape[axis + 1:]
        val = self.local("mv", out_shape, tdtype)
        arg = self.local("mi", out_shape, "int32")

        def line(o):
            out = (V.flat_index(out_shape, o),)
            k = Var("k")
            v = V.element(x, (*o[:axis], k, *o[axis:]))
            best, at, cur = self.register("mv", tdtype)
            first, _, where = self.register("mi", "int32")
            b = better(v, cur)
            kk = Cast("int32", k) if k.dtype != "int32" else k
            step = seq(BufferStore(first, select(b, kk, where), at), BufferStore(best, select(b, v, cur), at))
            return Allocate(best, Allocate(first, seq(
                BufferStore(best, init, at), BufferStore(first, const(0, "int32"), at),
                For(k, const(0), const(shape[axis]), "serial", step),
                BufferStore(val, cur, out), BufferStore(arg, where, out))))

        self.emit(self.nest(out_shape, line))
        return buffer_value(val, out_shape, x.dtype), buffer_value(arg, out_shape, index_dtype)

    def scan(self, x: V.Block, axis: int, combine: Callable, dtype, reverse: bool) -> V.Block:
        """Each line along the axis in one thread, serially."""
        tdtype = V.tir_dtype(dtype)
        shape = x.shape
        out = self.local("scan", shape, tdtype)
        rest = shape[:axis] + shape[axis + 1:]
        n = shape[axis]

        def line(ridx):
            j = Var("j")
            pos = const(n - 1) - j if reverse else j
            idx = (*ridx[:axis], pos, *ridx[axis:])
            value = V.convert(V.element(x, idx), x.dtype, dtype)
            acc, at, now = self.register("a", tdtype)
            step = seq(BufferStore(acc, select(te_binary("==", j, const(0)), value, combine(now, value)), at),
                       BufferStore(out, now, (V.flat_index(shape, idx),)))
            return Allocate(acc, For(j, const(0), const(n), "serial", step))

        if rest:
            self.emit(self._spread(rest, None, line))
        else:
            self.emit(self.on_threads(1, lambda t: line(())))
        return buffer_block(out, shape, dtype)

    def barrier(self) -> None:
        """`__syncthreads()`: what the threads wrote to memory (global too: the sync pass places
        barriers for shared memory only) is seen by all of them after it."""
        self.emit(Evaluate(Call(SYNC, (), "int32")))

    # -- tl.dot ----------------------------------------------------------------------------------
    def dot_inputs(self, dtype, m: int, n: int, k: int, precision: str):
        """float16 and bfloat16 operands stay as they are for the Tensor Cores when the product is
        of 16x16x16 tiles; so do float32 ones that may be rounded to TF32."""
        if m % TILE or n % TILE or k % TILE:
            return None
        if dtype in (tld.float16, tld.bfloat16) or dtype == tld.float32 and precision == "tf32":
            return dtype
        return None

    def dot(self, a: Buffer, b: Buffer, c: Buffer, m: int, n: int, k: int, precision: str = "ieee") -> None:
        """fp16, bf16 and TF32 products of 16x16x16 tiles on the Tensor Cores (`_tensor_cores`);
        else each thread a strided share of c's elements, each summed over k in a register."""
        if c.dtype == "float32" and not m % TILE and not n % TILE and not k % TILE and (
                a.dtype in ("float16", "bfloat16") or a.dtype == "float32" and precision == "tf32"):
            last = self.lists[-1][-1] if self.lists[-1] else None
            zeroed = isinstance(last, For) and last.annotation(SPREAD) is not None and self._zeroes(last, c)
            if zeroed:  # c's zeros: its fragments start at zero instead (no shared memory written and read back)
                self.lists[-1].pop()
            for x in self._tensor_cores(a, b, c, m, n, k, zeroed):
                self.emit(x)
            return
        acc, zero, now = self.register("acc", c.dtype)
        kk = Var("kk")

        def element(idx):
            i, jj = idx
            at = (i * n + jj,)
            prod = BufferLoad(a, (i * k + kk,), a.dtype) * BufferLoad(b, (kk * n + jj,), b.dtype)
            return Allocate(acc, seq(BufferStore(acc, BufferLoad(c, at, c.dtype), zero),
                                     For(kk, const(0), const(k), "serial", BufferStore(acc, now + prod, zero)),
                                     BufferStore(c, now, at)))

        self.emit(self._spread((m, n), None, element))

    def _tensor_cores(self, a: Buffer, b: Buffer, c: Buffer, m: int, n: int, k: int,
                      zeroed: bool) -> tuple[For, For, For]:
        """Three statements: each warp's fragments of c (`_warp_fragments`) loaded from c in shared
        memory (or zeroed: `zeroed`, c's zeros dropped), multiplied into over all of k
        (`_fragment_dot`), stored back to c. The product is marked (DOT) and the copies (COPY) so
        that a K loop around them may keep c in fragments across its iterations instead
        (`_in_registers`)."""
        self._dots.append((a, b, c, m, n, k))
        key = len(self._dots) - 1
        frag, load, store = self._fragments(c, m, n, zeroed)
        self._frags[key] = frag
        dot = self._fragment_dot(key, frag)
        return (replace(load, annotations=(*load.annotations, (COPY, key))),
                replace(dot, annotations=(*dot.annotations, (DOT, key))),
                replace(store, annotations=(*store.annotations, (COPY, key))))

    def _marked(self, body: Stmt, key: int) -> tuple[list[For], list[For]]:
        """The statements of dot `key` in body: its product, its copies."""
        return (collect(body, lambda x: isinstance(x, For) and x.annotation(DOT) == key),
                collect(body, lambda x: isinstance(x, For) and x.annotation(COPY) == key))

    def _warp_tiles(self, m: int, n: int, kind: str, tile: Callable[[PrimExpr, PrimExpr, PrimExpr], Stmt]) -> For:
        """tile(s, row, col) for each warp's s-th 16x16 tile of an (m, n) block (tile s * warps +
        warp, row-major), the warps along threadIdx.y; `kind`: that of the loop over s."""
        cols, tiles = n // TILE, (m // TILE) * (n // TILE)
        ty, s = Var("ty"), Var("s")
        steps = -(-tiles // self.warps)
        t = ty if steps == 1 else s * self.warps + ty
        body = tile(const(0) if steps == 1 else s, t // cols * TILE, t % cols * TILE)
        if steps > 1:
            if tiles % self.warps:
                body = IfThenElse(te_binary("<", t, const(tiles)), body)
            body = For(s, const(0), const(steps), kind, body)
        return bound(ty, min(tiles, self.warps), "threadIdx.y", body)

    def _accumulate_in_place(self, body: Stmt) -> Stmt:
        """body with each `acc += tl.dot(a, b)` a dot into acc itself, as `acc = tl.dot(a, b, acc)`
        is (Triton folds the sum into the dot too): the dot's own block, zeroed before it and
        added to acc after it, touched nowhere else, is dropped (so that `_in_registers` may keep
        acc in fragments)."""
        for key, (a, b, d, m, n, k) in enumerate(self._dots):
            dot, copies = self._marked(body, key)
            users = [x for x in collect(body, lambda x: isinstance(x, For) and x.annotation(SPREAD) is not None)
                     if _touches(x, d)]
            if len(dot) != 1 or len(users) != 1 or self._dots_into(d) != 1:
                continue
            (add,) = users
            acc = self._sum_into(add, d)
            gone = dict.fromkeys((add, dot[0], *copies), _NOP)
            if acc is None or not self._zero_start(copies) or not _in_turn(body, dot[0], add, acc) or _touches(
                    _replaced(body, gone), d):
                continue
            self._dots[key] = (a, b, acc, m, n, k)
            into = self._tensor_cores(a, b, acc, m, n, k, False)
            self._dots.pop()  # (the new statements' entry: they keep the dot's key)
            self.allocs.remove(self._frags[key])
            self._frags[key] = self._frags.pop(len(self._dots))
            into = [replace(x, annotations=tuple((p, key if p in (DOT, COPY) else v) for p, v in x.annotations))
                    for x in into]
            body = _replaced(body, {**dict.fromkeys((add, *copies), SeqStmt(())), dot[0]: SeqStmt(tuple(into))})
            self.allocs.remove(d)
        return body

    def _dots_into(self, c: Buffer) -> int:
        """How many Tensor Core dots write c."""
        return sum(x[2] is c for x in self._dots)

    def _zero_start(self, copies: list[For]) -> bool:
        """Whether a dot's copies (its load or fill, its store) start its fragments at zero."""
        return any(x.annotation(ZERO) for x in copies)

    def _sum_into(self, add: For, d: Buffer) -> Buffer | None:
        """acc where `add` is acc[e] = acc[e] + d[e] at its own elements e, else None."""
        _, flat, _, _ = self._spreads[add.annotation(SPREAD)]
        stores = collect(add, lambda x: isinstance(x, BufferStore | CallRoutine))
        if len(stores) != 1 or not isinstance(stores[0], BufferStore):
            return None
        acc = stores[0].buffer
        want = BufferLoad(acc, (flat,), acc.dtype) + BufferLoad(d, (flat,), d.dtype)
        same = structural_key(stores[0].indices[0]) == structural_key(flat)
        return acc if same and structural_key(stores[0].value) == structural_key(want) else None

    def _zeroes(self, zero: For, d: Buffer) -> bool:
        """Whether `zero` only stores 0 to d at its own elements."""
        stores = collect(zero, lambda x: isinstance(x, BufferStore | CallRoutine))
        return (len(stores) == 1 and isinstance(stores[0], BufferStore) and stores[0].buffer is d
                and self._own_elements(zero, d) and structural_key(stores[0].value) == structural_key(
                    const(0, d.dtype)))

    def _in_registers(self, body: Stmt) -> Stmt:
        """body with each serial loop whose Tensor Core dots are the only accesses to their
        accumulator (Triton's `acc = tl.dot(a, b, acc)` over K) keeping that accumulator in
        fragments for the whole loop: each warp loads its tiles of it before the loop, each dot
        multiplies into them, and they are stored back once after it. Other dots keep theirs in
        shared memory."""
        def unmarked(x):
            if isinstance(x, For) and any(p[0] in (DOT, COPY, ZERO) for p in x.annotations):
                return replace(x, annotations=tuple(p for p in x.annotations if p[0] not in (DOT, COPY, ZERO)))
            return None

        body = mutate_stmt(body, f_stmt=lambda x: self._hoisted(x) if isinstance(x, For) and x.kind == "serial"
                           else None)
        return mutate_stmt(body, f_stmt=unmarked)

    def _hoisted(self, loop: For) -> Stmt | None:
        marked = collect(loop.body, lambda x: isinstance(x, For) and x.annotation(DOT) is not None)
        by_acc: dict[Buffer, list[For]] = {}
        for x in marked:
            by_acc.setdefault(self._dots[x.annotation(DOT)][2], []).append(x)
        before, after, moved = [], [], {}
        for c, dots in by_acc.items():
            copies = [y for d in dots for y in self._marked(loop.body, d.annotation(DOT))[1]]
            if any(self._zero_start(self._marked(loop.body, d.annotation(DOT))[1]) for d in dots) or _touches(
                    _replaced(loop.body, dict.fromkeys((*dots, *copies), _NOP)), c):
                continue  # (a dot from zero each iteration, or c touched elsewhere in the loop)
            frag, load, store = self._fragments(c, *self._dots[dots[0].annotation(DOT)][3:5])
            before.append(load)
            after.append(store)
            moved.update({d: self._fragment_dot(d.annotation(DOT), frag) for d in dots})
            moved.update(dict.fromkeys(copies, SeqStmt(())))
            for d in dots:  # (each dot's own fragments, which the loop's replace)
                self.allocs.remove(self._frags[d.annotation(DOT)])
        if not moved:
            return None
        return seq(*before, replace(loop, body=_replaced(loop.body, moved)), *after)

    def _warp_grid(self, m: int, n: int) -> tuple[int, int] | None:
        """(fm, fn): the warps as a grid over the (m, n) accumulator's 16x16 tiles (Triton's
        warpsPerCTA), each warp holding a contiguous fm x fn block of them, the grid chosen for the
        fewest fragment loads per 16 of k (fm + fn: a warp loads each of its fragments of A and of B
        once, ember.intrinsics.wmma.warp_mma); None where no grid of the warps divides the tiles."""
        best = None
        for wr in (1 << i for i in range(self.warps.bit_length())):
            wc = self.warps // wr
            if (m // TILE) % wr or (n // TILE) % wc:
                continue
            grid = (m // TILE // wr, n // TILE // wc)
            if best is None or sum(grid) < sum(best):
                best = grid
        return best

    def _warp_fragments(self, m: int, n: int, tile: Callable[[PrimExpr, PrimExpr, PrimExpr], Stmt]) -> For:
        """tile(offset, row, col) for each of the warp's fragments of an (m, n) accumulator: at
        element `offset` of the warp's fragment buffer (`_fragment_shape`), tile (row, col) of the
        accumulator; a grid of warps (`_warp_grid`) where one divides the tiles, else each warp a
        strided share of them (`_warp_tiles`)."""
        grid = self._warp_grid(m, n)
        if grid is None:
            return self._warp_tiles(m, n, "unrolled", lambda s, row, col: tile(s * TILE * TILE, row, col))
        fm, fn = grid
        ty = Var("ty")
        row0, col0 = ty // (n // TILE // fn) * (fm * TILE), ty % (n // TILE // fn) * (fn * TILE)
        return bound(ty, self.warps, "threadIdx.y", seq(*(
            tile(const(i * TILE * fn * TILE + j * TILE), row0 + i * TILE, col0 + j * TILE)
            for i in range(fm) for j in range(fn))))

    def _fragment_shape(self, m: int, n: int) -> tuple[int, int]:
        """The shape of a warp's fragment buffer (ember.cuda.fragments: fragments row-major)."""
        grid = self._warp_grid(m, n)
        if grid is None:
            return -(-(m // TILE) * (n // TILE) // self.warps) * TILE, TILE
        return grid[0] * TILE, grid[1] * TILE

    def _fragments(self, c: Buffer, m: int, n: int, zeroed: bool = False) -> tuple[Buffer, For, For]:
        """Fragments for each warp's tiles of the (m, n) accumulator c (`_warp_fragments`), the
        statement loading them from c (ember.intrinsics.wmma's LOAD; `zeroed`: setting them to
        zero instead, marked ZERO) and the one storing them back (STORE)."""
        shape = self._fragment_shape(m, n)
        frag = Buffer(self.name("frag"), tuple(const(x) for x in shape), "float32", scope=fragments.SCOPE)
        self.allocs.append(frag)

        def copy(intrin, frag_first: bool):
            """frag's tile at `offset` from or to c's (row, col) tile: c's row stride is the call's ldm."""
            def call(offset, row, col):
                tiles = [Pointer(c, row * n + col), Pointer(frag, offset)]
                strides = [const(n), const(1), const(shape[1]), const(1)]
                if frag_first:
                    tiles, strides = tiles[::-1], strides[2:] + strides[:2]
                return CallRoutine(intrin.call("body").routine, _params(intrin, "body", (0,), (1,), 1),
                                   (tiles[0],), (tiles[1],), (const(n), *strides))
            return call

        def fill(offset, row, col):
            """frag's tile at `offset` zeroed (LOAD's reset: its C call takes the fragment alone)."""
            del row, col
            at = Pointer(frag, offset)  # (its description's input too: nothing shared is read)
            return CallRoutine(ZERO_FRAGMENT, _params(LOAD, "reset", (), (1,), 0), (at,), (at,),
                               (const(shape[1]), const(1), const(shape[1]), const(1)))

        if zeroed:
            load = self._warp_fragments(m, n, fill)
            load = replace(load, annotations=(*load.annotations, (ZERO, True)))
        else:
            load = self._warp_fragments(m, n, copy(LOAD, False))
        return frag, load, self._warp_fragments(m, n, copy(STORE, True))

    def _fragment_dot(self, key: int, frag: Buffer) -> Stmt:
        """Dot `key` multiplying into the warps' fragments `frag`: with a grid of warps over fp16
        or bf16 operands, one call per 16 of k updating the warp's whole block of fragments, each
        fragment of A and B loaded once (ember.intrinsics.wmma's warp_mma); else a call per
        fragment (MMA)."""
        a, b, _, m, n, k = self._dots[key]
        kk = Var("kk")
        grid = self._warp_grid(m, n)
        if grid is not None and a.dtype in ("float16", "bfloat16"):
            fm, fn = grid
            mma = warp_mma(a.dtype, fm * TILE, fn * TILE)
            ty = Var("ty")
            row0, col0 = ty // (n // TILE // fn) * (fm * TILE), ty % (n // TILE // fn) * (fn * TILE)
            strides = tuple(const(x) for x in (k, 1, n, 1, fn * TILE, 1))
            call = CallRoutine(mma.call("update").routine, _params(mma, "update", (0, 1), (2,), 2),
                               (Pointer(a, row0 * k + kk * TILE), Pointer(b, kk * TILE * n + col0)),
                               (Pointer(frag, const(0)),), (const(k), const(n), *strides))
            return bound(ty, self.warps, "threadIdx.y", For(kk, const(0), const(k // TILE), "serial", call))
        mma = MMA[a.dtype]
        ldf = self._fragment_shape(m, n)[1]

        def tile(offset, row, col):
            strides = tuple(const(x) for x in (k, 1, n, 1, ldf, 1))
            call = CallRoutine(mma.call("update").routine, _params(mma, "update", (0, 1), (2,), 2),
                               (Pointer(a, row * k + kk * TILE), Pointer(b, kk * TILE * n + col)),
                               (Pointer(frag, offset),), (const(k), const(n), *strides))
            return For(kk, const(0), const(k // TILE), "serial", call)

        return self._warp_fragments(m, n, tile)

    # -- blocks in registers ----------------------------------------------------------------------
    def _thread_own(self, body: Stmt) -> Stmt:
        """body with each scratch block that only statements spreading the same shape the same way
        touch, each thread only at its own elements, held by each thread as its own elements
        (registers) rather than in shared memory: a load read in, an elementwise intermediate
        (vector add's operands, a softmax row's exponentials read back by the division)."""
        spreads = collect(body, lambda x: isinstance(x, For) and x.annotation(SPREAD) is not None)
        for buf in [b for b in self.allocs if b.scope == "global"]:
            users = [x for x in spreads if _touches(x, buf)]
            if not users or {self._spreads[x.annotation(SPREAD)][0] for x in users} != {
                    self._spreads[users[0].annotation(SPREAD)][0]}:
                continue
            if _touches(_replaced(body, dict.fromkeys(users, _NOP)), buf) or not all(
                    self._own_elements(x, buf) for x in users):
                continue
            mine = Buffer(buf.name, (const(self._spreads[users[0].annotation(SPREAD)][3]),), buf.dtype, scope="local")
            moved = {x: self._moved(x, buf, mine) for x in users}
            body = _replaced(body, moved)
            spreads = [moved.get(x, x) for x in spreads]
            self.allocs[self.allocs.index(buf)] = mine
        return mutate_stmt(body, f_stmt=lambda x: replace(x, annotations=tuple(
            p for p in x.annotations if p[0] != SPREAD)) if isinstance(x, For) and x.annotation(SPREAD) is not None
            else None)

    def _own_elements(self, spread: For, buf: Buffer) -> bool:
        """Whether every access of spread to buf is at the statement's own element."""
        _, flat, _, _ = self._spreads[spread.annotation(SPREAD)]
        key = structural_key(flat)
        found = []

        def on_stmt(x):
            if isinstance(x, CallRoutine) and any(p.buffer is buf for p in x.reads + x.writes):
                found.append(None)
            if isinstance(x, BufferStore) and x.buffer is buf:
                found.append(x.indices)
            for e in stmt_exprs(x):
                visit_expr(e, lambda y: found.append(y.indices) if isinstance(y, BufferLoad) and y.buffer is buf
                           else None)

        visit_stmt(spread, on_stmt)
        return all(i is not None and len(i) == 1 and structural_key(i[0]) == key for i in found)

    def _moved(self, spread: For, buf: Buffer, mine: Buffer) -> Stmt:
        """spread with its accesses to buf made to the thread's own element j of mine."""
        _, _, j, _ = self._spreads[spread.annotation(SPREAD)]

        def on_expr(e):
            return BufferLoad(mine, (j,), e.dtype) if isinstance(e, BufferLoad) and e.buffer is buf else None

        def on_stmt(x):
            return BufferStore(mine, x.value, (j,)) if isinstance(x, BufferStore) and x.buffer is buf else None

        return mutate_stmt(spread, f_stmt=on_stmt, f_expr=on_expr)

    # -- deferred loads ----------------------------------------------------------------------------
    def read_in(self, d: Deferred) -> Buffer:
        buf = self.local("ld", d.shape, d.dtype)
        self.versioned(d.shape, lambda idx, full: BufferStore(buf, d.direct(idx, full), (V.flat_index(d.shape, idx),)),
                       1, d.inner)
        if self.lists[-1]:
            self._read_ins[buf] = (d, self.lists[-1][-1])
        return buf

    def _vector_operands(self, body: Stmt) -> Stmt:
        """body with each block read in for a Tensor Core dot copied 16 bytes at a time where it
        can be (`_vector_read`). An operand that only the dots read is padded too: 16 bytes after
        each row, its stores and the dots' pointers moved (`_padded`), so that the 8 rows of 16
        bytes a fragment load reads at once fall in different banks (rows of 64 or 256 bytes put
        4 or 8 of them in the same ones)."""
        cols: dict[Buffer, set[int]] = {}
        for a, b, _, _, n, k in self._dots:
            cols.setdefault(a, set()).add(k)
            cols.setdefault(b, set()).add(n)
        for buf, widths in cols.items():
            width = min(widths)
            pad = 128 // dt.bits(buf.dtype) if len(widths) == 1 and self._read_by_dots_alone(body, buf) else 0
            into = buf if not pad else Buffer(buf.name, (const(as_int(buf.shape[0]) // width * (width + pad)),),
                                              buf.dtype, scope=buf.scope)
            if buf in self._read_ins and (new := self._vector_read(buf, into, pad)) is not None:
                body = _replaced(body, {self._read_ins[buf][1]: new})
            if pad:
                body = mutate_stmt(body, f_stmt=lambda x, buf=buf, into=into, width=width, pad=pad: _padded(
                    x, buf, into, width, pad))
                self.allocs[self.allocs.index(buf)] = into
        return body

    def _read_by_dots_alone(self, body: Stmt, buf: Buffer) -> bool:
        """Whether only Tensor Core calls read buf (and none writes it): other statements only
        store to it."""
        found = []

        def on_stmt(x):
            if isinstance(x, CallRoutine) and any(q.buffer is buf for q in x.writes):
                found.append(x)
            if not isinstance(x, CallRoutine):
                for e in stmt_exprs(x):
                    visit_expr(e, lambda y: found.append(y) if isinstance(y, BufferLoad) and y.buffer is buf else None)

        visit_stmt(body, on_stmt)
        return not found

    def _vector_read(self, buf: Buffer, into: Buffer, pad: int) -> Stmt | None:
        """The read-in of `buf`, into `into` (its rows `pad` elements apart), with each thread
        copying 16 bytes at a time: consecutive threads
        take consecutive 16-byte vectors along its rows, and a vector whose masks all hold and
        whose offset is a multiple of the vector's elements is one 16-byte load and store (`uint4`,
        `float4`: ember.cuda.vectors), the others element by element under their masks. For a
        load whose argument is 16-byte aligned (the specialization says so) and walks memory
        along the block's last dimension (where its wraps `offs % N` are the identity:
        affine.drop_wraps); None otherwise."""
        d, _ = self._read_ins[buf]
        shape, lanes = d.shape, 128 // dt.bits(d.dtype)
        probe = tuple(Var(f"q{i}") for i in range(len(shape)))
        full = d.direct(probe, True)
        if d.inner not in (None, len(shape) - 1) or shape[-1] % lanes or not (
                isinstance(full, BufferLoad) and full.buffer in self.aligned and len(full.indices) == 1):
            return None
        last = probe[-1]
        g = drop_wraps(Evaluate(full), {last: shape[-1]})[0].value.indices[0]  # (`offs % N`: see below)
        if linear(g, {last: 1}) != {last: 1}:  # (the other dimensions' strides may be run-time values)
            return None
        total = 1
        for n in shape:
            total *= n
        vectors, per_row = total // lanes, shape[-1] // lanes
        steps = -(-vectors // self.threads)
        v, j = Var("v"), Var("j")

        def share(t):
            q = t if steps == 1 else j * self.threads + t
            outer, rest = [], q // per_row
            for k, n in enumerate(reversed(shape[:-1])):
                outer.insert(0, rest if k == len(shape) - 2 else rest % n)
                rest = rest // n
            idx = (*outer, q % per_row * lanes + v)
            at = (V.flat_index(shape, idx) if not pad else idx[0] * (shape[1] + pad) + idx[1],)
            saved, self.masks = self.masks, []
            try:
                masked, masks = d.direct(idx, False), self.masks
            finally:
                self.masks = saved
            # Triton's matmul wraps its offsets (`offs % N`) where a vector inside the matrix is contiguous
            unwrapped, inside = drop_wraps(Evaluate(d.direct(idx, True)), {v: lanes})
            g = unwrapped.value.indices[0]
            base = Analyzer().simplify(substitute(g, {v: const(0, v.dtype)}))
            guard = te_binary("==", base % lanes, const(0, base.dtype))
            if inside is not None:
                guard = te_binary("&&", guard, inside)
            lane_masks = {structural_key(x): x for m in masks for x in (substitute(m, {v: const(i, v.dtype)})
                                                                        for i in range(lanes))}
            for m in lane_masks.values():  # (each distinct one: a row's mask is the same in every lane)
                guard = te_binary("&&", guard, m)
            vector = BufferStore(into, BufferLoad(full.buffer, (base // lanes * lanes + v,), full.dtype), at)
            s = IfThenElse(guard, For(v, const(0), const(lanes), "vectorized", vector),
                           For(v, const(0), const(lanes), "unrolled", BufferStore(into, masked, at)))
            if vectors % self.threads:
                s = IfThenElse(te_binary("<", q, const(vectors)), s)
            return s if steps == 1 else For(j, const(0), const(steps), "serial", s)

        return self.on_threads(min(vectors, self.threads), share)

    # -- the grid ----------------------------------------------------------------------------------
    def kernel(self, pid: Var, programs: PrimExpr) -> Stmt:
        """The programs as blocks (blockIdx.x: the flattened grid), the scratch in each."""
        body = self._in_registers(self._accumulate_in_place(seq(*self.lists[0])))
        body = self._thread_own(self._vector_operands(body))
        for buf in reversed(self.allocs):
            body = Allocate(buf, body)
        return For(pid, const(0), programs, THREAD_BINDING, body, (("thread_tag", "blockIdx.x"),))
