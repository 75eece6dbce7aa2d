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
operands stay in their type in shared memory and each warp takes a strided share of the output's
16x16 tiles, one wmma call per 16 of k (ember.intrinsics.wmma). In a loop whose dots are the only
accesses to their accumulator (Triton's `acc = tl.dot(a, b, acc)` over K), each warp keeps its
tiles of the accumulator as wmma fragments in registers for the whole loop: loaded once before
it, multiplied into by each step, stored back once after it; `acc += tl.dot(a, b)` is first
folded into a dot into acc, as Triton does. A dot elsewhere, or whose accumulator the loop also
reads (attention's rescaled one), loads and stores its tile in shared memory around each call
(SHARED_MMA). wmma rather than mma.sync:
the fragments' layout across the lanes is the compiler's, and the same calls serve fp16, bf16 and
TF32 without per-shape register bookkeeping (ember.intrinsics.wmma's module doc). Any other
`tl.dot` gives each thread a strided share of the output tile on CUDA cores, each element summed
over k in a register.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ...cuda import fragments
from ...intrinsics.wmma import LOAD, MMA, SHARED_MMA, STORE
from ...tir.expr import Buffer, BufferLoad, Call, Cast, PrimExpr, Var, const, select
from ...tir.expr import binary as te_binary
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
from .emitter import Body, Deferred, Emitter, buffer_block, buffer_value

WARP = 32
TILE = 16  # a Tensor Core product's tile: 16x16x16
DOT = "tile_dot"  # a Tensor Core dot's statement: its index among the Emitter's dots
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


def _in_turn(body: Stmt, zero: Stmt, dot: Stmt, add: Stmt, acc: Buffer) -> bool:
    """Whether zero, dot and add are statements of one sequence, in this order, with none between
    dot and add touching acc (the dot may then write acc where add did)."""
    for block in collect(body, lambda x: isinstance(x, SeqStmt) and any(y is dot for y in x.stmts)):
        at = {id(y): i for i, y in enumerate(block.stmts)}
        i, j, k = (at.get(id(x)) for x in (zero, dot, add))
        return i is not None and k is not None and i < j < k and not any(
            _touches(y, acc) for y in block.stmts[j + 1:k])
    return False


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
        """out[o] = the fold of value along axis, in one thread."""
        k = Var("k")
        acc, at, now = self.register("a", out.dtype)
        step = BufferStore(acc, combine(now, value((*o[:axis], k, *o[axis:]))), at)
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
            self.emit(self._tensor_cores(a, b, c, m, n, k))
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

    def _tensor_cores(self, a: Buffer, b: Buffer, c: Buffer, m: int, n: int, k: int) -> Stmt:
        """Each warp a strided share of c's 16x16 tiles, each updated once per 16 of k by the wmma
        call that loads the tile of c from shared memory, multiplies a's and b's tiles into it
        and stores it back (ember.intrinsics.wmma's SHARED_MMA: the whole warp makes each call).
        The statement is marked (DOT) so that the K loop around it may keep c in fragments
        instead (`_in_registers`)."""
        mma = SHARED_MMA[a.dtype]
        kk = Var("kk")

        def tile(s, row, col):
            strides = tuple(const(x) for x in (k, 1, n, 1, n, 1))
            call = CallRoutine(mma.call("update").routine, _params(mma, "update", (0, 1), (2,), 3),
                               (Pointer(a, row * k + kk * TILE), Pointer(b, kk * TILE * n + col)),
                               (Pointer(c, row * n + col),), (const(k), const(n), const(n), *strides))
            return For(kk, const(0), const(k // TILE), "serial", call)

        self._dots.append((a, b, c, m, n, k))
        loop = self._warp_tiles(m, n, "serial", tile)
        return replace(loop, annotations=(*loop.annotations, (DOT, len(self._dots) - 1)))

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
            dot = collect(body, lambda x, key=key: isinstance(x, For) and x.annotation(DOT) == key)
            users = [x for x in collect(body, lambda x: isinstance(x, For) and x.annotation(SPREAD) is not None)
                     if _touches(x, d)]
            if len(dot) != 1 or len(users) != 2:
                continue
            zero, add = users
            acc = self._sum_into(add, d)
            if acc is None or not self._zeroes(zero, d) or not _in_turn(body, zero, dot[0], add, acc) or _touches(
                    _replaced(body, dict.fromkeys((zero, add, dot[0]), _NOP)), d):
                continue
            self._dots[key] = (a, b, acc, m, n, k)
            into = self._tensor_cores(a, b, acc, m, n, k)
            self._dots.pop()  # (the new statement's entry: it keeps the dot's key)
            into = replace(into, annotations=tuple((p, key if p == DOT else v) for p, v in into.annotations))
            body = _replaced(body, {zero: SeqStmt(()), add: SeqStmt(()), dot[0]: into})
            self.allocs.remove(d)
        return body

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
            if isinstance(x, For) and x.annotation(DOT) is not None:
                return replace(x, annotations=tuple(p for p in x.annotations if p[0] != DOT))
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
            if _touches(_replaced(loop.body, dict.fromkeys(dots, _NOP)), c):
                continue
            frag, load, store = self._fragments(c, *self._dots[dots[0].annotation(DOT)][3:5])
            before.append(load)
            after.append(store)
            moved.update({d: self._fragment_dot(d.annotation(DOT), frag) for d in dots})
        if not moved:
            return None
        return seq(*before, replace(loop, body=_replaced(loop.body, moved)), *after)

    def _fragments(self, c: Buffer, m: int, n: int) -> tuple[Buffer, Stmt, Stmt]:
        """Fragments for each warp's tiles of the (m, n) accumulator c (`_warp_tiles`' order), the
        statement loading them from c and the one storing them back (ember.intrinsics.wmma's LOAD
        and STORE)."""
        steps = -(-(m // TILE) * (n // TILE) // self.warps)
        frag = Buffer(self.name("frag"), (const(steps * TILE), const(TILE)), "float32", scope=fragments.SCOPE)
        self.allocs.append(frag)

        def copy(intrin, frag_first: bool):
            """frag's tile s from or to c's (row, col) tile: c's row stride is the call's ldm."""
            def call(s, row, col):
                tiles = [Pointer(c, row * n + col), Pointer(frag, s * TILE * TILE)]
                strides = [const(n), const(1), const(TILE), const(1)]
                if frag_first:
                    tiles, strides = tiles[::-1], strides[2:] + strides[:2]
                return CallRoutine(intrin.call("body").routine, _params(intrin, "body", (0,), (1,), 1),
                                   (tiles[0],), (tiles[1],), (const(n), *strides))
            return call

        return (frag, self._warp_tiles(m, n, "unrolled", copy(LOAD, False)),
                self._warp_tiles(m, n, "unrolled", copy(STORE, True)))

    def _fragment_dot(self, key: int, frag: Buffer) -> Stmt:
        """Dot `key` multiplying into the warps' fragments `frag` (ember.intrinsics.wmma's MMA)."""
        a, b, _, m, n, k = self._dots[key]
        mma = MMA[a.dtype]
        kk = Var("kk")

        def tile(s, row, col):
            strides = tuple(const(x) for x in (k, 1, n, 1, TILE, 1))
            call = CallRoutine(mma.call("update").routine, _params(mma, "update", (0, 1), (2,), 2),
                               (Pointer(a, row * k + kk * TILE), Pointer(b, kk * TILE * n + col)),
                               (Pointer(frag, s * TILE * TILE),), (const(k), const(n), *strides))
            return For(kk, const(0), const(k // TILE), "serial", call)

        return self._warp_tiles(m, n, "unrolled", tile)

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
        return buf

    # -- the grid ----------------------------------------------------------------------------------
    def kernel(self, pid: Var, programs: PrimExpr) -> Stmt:
        """The programs as blocks (blockIdx.x: the flattened grid), the scratch in each."""
        body = self._thread_own(self._in_registers(self._accumulate_in_place(seq(*self.lists[0]))))
        for buf in reversed(self.allocs):
            body = Allocate(buf, body)
        return For(pid, const(0), programs, THREAD_BINDING, body, (("thread_tag", "blockIdx.x"),))
