"""Block operations as loop IR: the loop nests a kernel's block values become.

Every block statement (a load, a store, a value kept in memory) is a loop nest over the block's
shape whose innermost loop is vectorized (in chunks of one SIMD register). A nest whose loads
or stores are masked is versioned: where every mask is a comparison affine in the block's
indices (`offs < n`, `rows[:, None] < M`), the test that the whole block is in bounds is one
scalar condition, and the block runs unmasked and vectorized when it holds; otherwise (the
ragged edge of the data) a scalar loop tests each element. Reductions accumulate in one register
of partial results per row; `tl.dot` is a register-tiled micro-kernel over blocks kept in L1
(an MR x NR accumulator tile in vector registers, a broadcast of A times a vector of B per k), as
ember's GEMM schedule does.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable

from ...tir import dtype as tdt
from ...tir.expr import Binary, Buffer, BufferLoad, Cast, Const, PrimExpr, Var, const, select
from ...tir.expr import binary as te_binary
from ...tir.functor import mutate_stmt, substitute, uses_var
from ...tir.stmt import Allocate, BufferStore, For, IfThenElse, Stmt, seq
from . import values as V

Body = Callable[[tuple[PrimExpr, ...], bool], Stmt | None]

_names = itertools.count()


class Emitter:
    """Collects a program's statements and its local buffers."""

    def __init__(self, vector_bytes: int, debug: bool):
        self.vector_bytes = vector_bytes or 16
        self.debug = debug
        self.lists: list[list[Stmt]] = [[]]
        self.allocs: list[Buffer] = []
        self.masks: list[PrimExpr] | None = None  # collected while a versioned nest is built
        self.full = False  # building the unmasked version of a versioned nest
        self.lane_vars: dict[Var, int] = {}
        self.pending: list[Deferred] = []  # loads not yet read into memory

    # -- statements ----------------------------------------------------------------------------
    def emit(self, s: Stmt | None) -> None:
        if s is not None:
            self.lists[-1].append(s)

    @contextlib.contextmanager
    def capture(self):
        out: list[Stmt] = []
        self.lists.append(out)
        try:
            yield out
        finally:
            self.lists.pop()

    def local(self, hint: str, shape: tuple[int, ...], dtype: str) -> Buffer:
        n = 1
        for d in shape:
            n *= d
        buf = Buffer(f"{hint}{next(_names)}", (const(max(n, 1)),), dtype, scope="local")
        self.allocs.append(buf)
        return buf

    def lanes(self, dtype: str) -> int:
        return max(1, self.vector_bytes // max(1, tdt.bits(dtype) // 8))

    # -- loop nests --------------------------------------------------------------------------------
    def nest(self, shape: tuple[int, ...], body: Callable[[tuple[PrimExpr, ...]], Stmt | None], *,
             vector: bool = True, lanes: int = 16, inner: int | None = None) -> Stmt | None:
        """Loops over `shape` around body(index); the innermost loop runs over dimension `inner`
        (default: the last), vectorized in chunks of `lanes` when `vector`."""
        inner = len(shape) - 1 if inner is None else inner
        loops: list[tuple[Var, int, str]] = []
        innermost: list[tuple[Var, int, str]] = []
        idx: list[PrimExpr] = []
        for d, n in enumerate(shape):
            last = d == inner
            if n == 1:
                idx.append(const(0))
                continue
            if vector and last and n > lanes and n % lanes == 0:
                c, v = Var(f"c{d}"), Var(f"v{d}")
                loops.append((c, n // lanes, "serial"))
                innermost.append((v, lanes, "vectorized"))
                idx.append(c * lanes + v)
            else:
                i = Var(f"i{d}")
                (innermost if last else loops).append((i, n, "vectorized" if vector and last else "serial"))
                idx.append(i)
        loops += innermost
        for v, n, _ in loops:
            self.lane_vars[v] = n
        s = body(tuple(idx))
        if s is None:
            return None
        for v, n, kind in reversed(loops):
            s = For(v, const(0), const(n), kind, s)
        return s

    def versioned(self, shape: tuple[int, ...], body: Body, lanes: int, inner: int | None = None,
                  fast_nest: Callable | None = None) -> None:
        """Emit the nest of body over shape; masked accesses (body's `full` False) are versioned
        as the module doc says; `inner`: the dimension of the vectorized loop (see nest);
        `fast_nest()`: the unmasked nest, when it is not `nest`'s."""
        saved = self.masks, self.full
        try:
            self.masks, self.full = [], False
            slow = self.nest(shape, lambda idx: body(idx, False), vector=False)
            masks = self.masks
            full = None if self.debug else all_true(masks, self.lane_vars)
            if masks and full is None:
                self.emit(slow)
                return
            self.masks, self.full = None, True
            if fast_nest is not None:
                fast = fast_nest()
            else:
                fast = self.nest(shape, lambda idx: body(idx, True), vector=True, lanes=lanes, inner=inner)
        finally:
            self.masks, self.full = saved
        if not self.debug:
            wrapped, in_range = drop_wraps(fast, self.lane_vars)
            if in_range is not None:  # `offs % M` with offs inside [0, M): the offsets themselves
                if not masks:
                    full, slow = in_range, fast
                else:
                    full = Binary("&&", full, in_range, "bool")
                fast, masks = wrapped, True
        self.emit(IfThenElse(full, fast, slow) if masks else fast)

    def mask(self, m: PrimExpr) -> PrimExpr:
        """Record a mask of the nest being built (see versioned)."""
        if self.masks is not None:
            self.masks.append(m)
        return m

    # -- values in memory ------------------------------------------------------------------------
    def materialize(self, v: V.Block, hint: str = "t") -> V.Block:
        """v kept in a local buffer (a Block reading it)."""
        if v.buffer is not None:
            return v
        buf = self.local(hint, v.shape, V.tir_dtype(v.dtype))
        self.store_block(buf, v)
        return buffer_block(buf, v.shape, v.dtype)

    def store_block(self, buf: Buffer, v: V.Block | V.Scalar, shape: tuple[int, ...] | None = None) -> None:
        shape = v.shape if shape is None else shape
        self.emit(self.nest(shape, lambda idx: BufferStore(buf, V.element(v, idx), (V.flat_index(shape, idx),)),
                            lanes=self.lanes(buf.dtype)))

    def scalar(self, expr: PrimExpr, dtype, hint: str = "s") -> V.Scalar:
        """A scalar computed here, once (kept in a one-element local buffer)."""
        buf = self.local(hint, (), V.tir_dtype(dtype))
        self.emit(BufferStore(buf, expr, (const(0),)))
        return V.Scalar(BufferLoad(buf, (const(0),), buf.dtype), dtype)

    # -- reductions ------------------------------------------------------------------------------
    def reduce(self, x: V.Block, axis: int, combine: Callable, init: PrimExpr, dtype) -> V.Block | V.Scalar:
        """x reduced along axis with combine(acc, value) from init; a Block of the other axes
        (a Scalar when none is left)."""
        tdtype = V.tir_dtype(dtype)
        shape = x.shape
        out_shape = shape[:axis] + shape[axis + 1:]
        out = self.local("r", out_shape, tdtype)

        def value(idx):
            return V.convert(V.element(x, idx), x.dtype, dtype)

        if axis == len(shape) - 1:
            n = shape[-1]
            w = min(n, self.lanes(tdtype))
            part = self.local("p", (w,), tdtype)

            def row(oidx):
                o = V.flat_index(out_shape, oidx)
                c = Var("k")
                lane = Var("l")
                fill = For(lane, const(0), const(w), "vectorized", BufferStore(part, init, (lane,)))
                acc = For(lane, const(0), const(w), "vectorized",
                          BufferStore(part, combine(BufferLoad(part, (lane,), tdtype),
                                                    value((*oidx, c * w + lane))), (lane,)))
                acc = For(c, const(0), const(n // w), "serial", acc)
                fold = For(lane, const(0), const(w), "serial",
                           BufferStore(out, combine(BufferLoad(out, (o,), tdtype), BufferLoad(part, (lane,), tdtype)),
                                       (o,)))
                return seq(fill, acc, BufferStore(out, init, (o,)), fold)

            self.emit(self.nest(out_shape, row, vector=False) if out_shape else row(()))
        else:
            self.emit(self.nest(out_shape, lambda o: BufferStore(out, init, (V.flat_index(out_shape, o),)),
                                lanes=self.lanes(tdtype)))

            def step(idx):
                o = V.flat_index(out_shape, idx[:axis] + idx[axis + 1:])
                return BufferStore(out, combine(BufferLoad(out, (o,), tdtype), value(idx)), (o,))

            self.emit(self.nest(shape, step, lanes=self.lanes(tdtype)))
        if not out_shape:
            return V.Scalar(BufferLoad(out, (const(0),), tdtype), dtype)
        return buffer_block(out, out_shape, dtype)

    def arg_reduce(self, x: V.Block, axis: int, better: Callable, init: PrimExpr, index_dtype):
        """(the best value, its first index) along axis; better(a, b): a replaces b."""
        tdtype = V.tir_dtype(x.dtype)
        shape = x.shape
        out_shape = shape[:axis] + shape[axis + 1:]
        val = self.local("mv", out_shape, tdtype)
        arg = self.local("mi", out_shape, "int32")
        def start(o):
            at = (V.flat_index(out_shape, o),)
            return seq(BufferStore(val, init, at), BufferStore(arg, const(0, "int32"), at))

        self.emit(self.nest(out_shape, start, vector=False))

        def step(idx):
            o = V.flat_index(out_shape, idx[:axis] + idx[axis + 1:])
            v = V.element(x, idx)
            cur = BufferLoad(val, (o,), tdtype)
            b = better(v, cur)
            return seq(BufferStore(arg, select(b, Cast("int32", idx[axis]) if idx[axis].dtype != "int32" else idx[axis],
                                               BufferLoad(arg, (o,), "int32")), (o,)),
                       BufferStore(val, select(b, v, cur), (o,)))

        self.emit(self.nest(shape, step, vector=axis != len(shape) - 1, lanes=self.lanes(tdtype)))
        if not out_shape:
            return (V.Scalar(BufferLoad(val, (const(0),), tdtype), x.dtype),
                    V.Scalar(BufferLoad(arg, (const(0),), "int32"), index_dtype))
        return buffer_block(val, out_shape, x.dtype), buffer_block(arg, out_shape, index_dtype)

    def scan(self, x: V.Block, axis: int, combine: Callable, dtype, reverse: bool) -> V.Block:
        """The inclusive scan of x along axis (tl.cumsum, tl.cumprod): a serial loop along the
        axis, inside the loops of the other axes."""
        tdtype = V.tir_dtype(dtype)
        shape = x.shape
        out = self.local("scan", shape, tdtype)
        rest = shape[:axis] + shape[axis + 1:]
        n = shape[axis]

        def line(ridx):
            j = Var("j")
            pos = const(n - 1) - j if reverse else j
            prev = const(n) - j if reverse else j - 1
            idx = (*ridx[:axis], pos, *ridx[axis:])
            before = (*ridx[:axis], prev, *ridx[axis:])
            value = V.convert(V.element(x, idx), x.dtype, dtype)
            acc = select(te_binary("==", j, const(0)), value,
                         combine(BufferLoad(out, (V.flat_index(shape, before),), tdtype), value))
            return For(j, const(0), const(n), "serial", BufferStore(out, acc, (V.flat_index(shape, idx),)))

        self.emit(self.nest(rest, line, vector=False) if rest else line(()))
        return buffer_block(out, shape, dtype)

    # -- tl.dot --------------------------------------------------------------------------------------
    def dot(self, a: Buffer, b: Buffer, c: Buffer, m: int, n: int, k: int) -> None:
        """c[m, n] += a[m, k] @ b[k, n] (row-major local buffers of c's type): the micro-kernel."""
        lanes = self.lanes(c.dtype)
        nr = min(n, 2 * lanes)
        # accumulators, a broadcast of A and the vectors of B within the vector registers
        # (32 with AVX-512, 16 below)
        registers = 32 if self.vector_bytes >= 64 else 16
        mr = 8
        while mr > 1 and (mr * (nr // lanes or 1) + (nr // lanes or 1) + 1 > registers or m % mr):
            mr //= 2
        i0, j0, kk, ii, jj = Var("i0"), Var("j0"), Var("kk"), Var("ii"), Var("jj")
        tile = Buffer(f"acc{next(_names)}", (const(mr * nr),), c.dtype, scope="local")
        row, col = i0 * mr + ii, j0 * nr + jj
        t_at = ii * nr + jj
        load = For(ii, const(0), const(mr), "unrolled", For(jj, const(0), const(nr), "vectorized",
                   BufferStore(tile, BufferLoad(c, (row * n + col,), c.dtype), (t_at,))))
        prod = BufferLoad(a, (row * k + kk,), a.dtype) * BufferLoad(b, (kk * n + col,), b.dtype)
        fma = For(ii, const(0), const(mr), "unrolled", For(jj, const(0), const(nr), "vectorized",
                  BufferStore(tile, BufferLoad(tile, (t_at,), c.dtype) + prod, (t_at,))))
        back = For(ii, const(0), const(mr), "unrolled", For(jj, const(0), const(nr), "vectorized",
                   BufferStore(c, BufferLoad(tile, (t_at,), c.dtype), (row * n + col,))))
        body = Allocate(tile, seq(load, For(kk, const(0), const(k), "serial", fma), back))
        self.emit(For(i0, const(0), const(m // mr), "serial", For(j0, const(0), const(n // nr), "serial", body)))


class Deferred:
    """A block load read where it is consumed: inside a versioned nest (a store, another
    load) it is an access of the argument's memory, predicated like the nest; anywhere else
    (a reduction, tl.dot, a loop) it is first read into a local buffer, once. Before a
    statement that writes memory, the frontend reads in the deferred loads that values still
    use (`Frontend.flush`), so a load never sees a later store."""

    def __init__(self, em: Emitter, shape: tuple[int, ...], dtype: str, direct: Body, inner: int | None = None):
        self.em, self.shape, self.dtype, self.direct, self.inner = em, shape, dtype, direct, inner
        self.buffer: Buffer | None = None
        em.pending.append(self)

    def at(self, idx: tuple[PrimExpr, ...]) -> PrimExpr:
        if self.buffer is None and (self.em.masks is not None or self.em.full):
            return self.direct(idx, self.em.full)
        if self.buffer is None:
            self.read()
        return BufferLoad(self.buffer, (V.flat_index(self.shape, idx),), self.dtype)

    def read(self) -> None:
        if self.buffer is not None:
            return
        buf = self.em.local("ld", self.shape, self.dtype)
        lanes = self.em.lanes(self.dtype)
        transposed = self.inner == 0 and len(self.shape) == 2 and lanes > 1 and \
            all(n % lanes == 0 for n in self.shape)
        fast = (lambda: self.transposed(buf, lanes)) if transposed else None
        self.em.versioned(self.shape, lambda idx, full: BufferStore(buf, self.direct(idx, full),
                                                                    (V.flat_index(self.shape, idx),)),
                          lanes, self.inner, fast)
        self.buffer = buf

    def transposed(self, buf: Buffer, lanes: int) -> Stmt:
        """The unmasked read of a 2-D block whose memory is contiguous along its first dimension
        (a transposed operand: `k` of `tl.dot(q, k)` loaded as K[n, d] viewed (d, n)), by square
        tiles of `lanes`: each tile's rows are vector loads along memory into registers, and its
        columns, gathered from the registers (a transpose in shuffles), are vector stores into buf,
        where a lane-by-lane copy would scatter every element."""
        rows, cols = self.shape
        t0, t1, r, v = Var("t0"), Var("t1"), Var("r"), Var("v")
        for var, n in ((t0, rows // lanes), (t1, cols // lanes), (r, lanes), (v, lanes)):
            self.em.lane_vars[var] = n
        tile = Buffer(f"tr{next(_names)}", (const(lanes * lanes),), self.dtype, scope="local")
        # tile[r, v] = the element (t0 * L + v, t1 * L + r): row r of the tile is along memory
        fill = For(r, const(0), const(lanes), "unrolled", For(v, const(0), const(lanes), "vectorized", BufferStore(
            tile, self.direct((t0 * lanes + v, t1 * lanes + r), True), (r * lanes + v,))))
        spill = For(r, const(0), const(lanes), "unrolled", For(v, const(0), const(lanes), "vectorized", BufferStore(
            buf, BufferLoad(tile, (v * lanes + r,), self.dtype), ((t0 * lanes + r) * cols + t1 * lanes + v,))))
        body = Allocate(tile, seq(fill, spill))
        return For(t0, const(0), const(rows // lanes), "serial", For(t1, const(0), const(cols // lanes), "serial",
                                                                      body))


def contiguous_dim(pointer: V.Block) -> int | None:
    """The dimension along which a block of pointers is contiguous when it is not the last one
    (a transposed tile, `k_ptr + rn[None, :] * D + rd[:, None]`): reading along it and writing
    the local copy across is cheaper than gathering the argument's memory."""
    idx = tuple(Var(f"q{d}") for d in range(len(pointer.shape)))
    coef = _linear(pointer.at(idx), dict.fromkeys(idx, 1))
    if coef is None or coef.get(idx[-1], 0) == 1 or pointer.shape[-1] == 1:
        return None
    for d, v in enumerate(idx[:-1]):
        if coef.get(v, 0) == 1 and pointer.shape[d] > 1:
            return d
    return None


def buffer_block(buf: Buffer, shape: tuple[int, ...], dtype) -> V.Block:
    return V.Block(shape, dtype, lambda idx: BufferLoad(buf, (V.flat_index(shape, idx),), buf.dtype), buffer=buf)


# -- masks ---------------------------------------------------------------------------------------

def _linear(e: PrimExpr, lane_vars) -> dict[Var, int] | None:
    """The coefficients of the lane variables in e, if e is affine in them with constant
    coefficients (the rest does not depend on them); None otherwise."""
    if not uses_var(e, list(lane_vars)):
        return {}
    match e:
        case Var():
            return {e: 1}
        case Cast(dtype, v) if tdt.is_int(dtype):
            return _linear(v, lane_vars)
        case Binary("+" | "-", a, b, _):
            la, lb = _linear(a, lane_vars), _linear(b, lane_vars)
            if la is None or lb is None:
                return None
            sign = 1 if e.op == "+" else -1
            out = dict(la)
            for v, c in lb.items():
                out[v] = out.get(v, 0) + sign * c
            return out
        case Binary("*", a, b, _):
            for x, y in ((a, b), (b, a)):
                if isinstance(y, Const):
                    lx = _linear(x, lane_vars)
                    return None if lx is None else {v: c * int(y.value) for v, c in lx.items()}
    return None


def all_true(masks: list[PrimExpr], lane_vars: dict[Var, int]) -> PrimExpr | None:
    """One scalar condition under which every mask holds at every index of the nest, or None."""
    conds: list[PrimExpr] = []
    for m in masks:
        parts = _conjuncts(m)
        for p in parts:
            if not uses_var(p, list(lane_vars)):
                conds.append(p)
                continue
            if not (isinstance(p, Binary) and p.op in ("<", "<=", ">", ">=")):
                return None
            diff = _linear(p.a, lane_vars), _linear(p.b, lane_vars)
            if diff[0] is None or diff[1] is None:
                return None
            coef = dict(diff[0])
            for v, c in diff[1].items():
                coef[v] = coef.get(v, 0) - c
            grow = p.op in ("<", "<=")  # the worst index makes a - b largest
            corner = {v: const((lane_vars[v] - 1) if (c > 0) == grow and c != 0 else 0, v.dtype)
                      for v, c in coef.items()}
            conds.append(substitute(p, corner))
    out = None
    for c in conds:
        out = c if out is None else Binary("&&", out, c, "bool")
    return out if out is not None else const(True)


def drop_wraps(s: Stmt, lane_vars: dict[Var, int]) -> tuple[Stmt, PrimExpr | None]:
    """s with every integer `a % m` whose a is affine in the lane variables replaced by a, and
    the condition under which that is exact (0 <= a < m at every index; None: none found).
    Triton's matmul wraps its row offsets (`offs % M`) so that loads need no mask: where a whole
    block is inside the matrix, the wrap is the identity and the offsets stay contiguous."""
    conds: list[PrimExpr] = []
    variables = list(lane_vars)

    def on_expr(e):
        if isinstance(e, Binary) and e.op == "%" and tdt.is_int(e.dtype) and tdt.lanes_of(e.dtype) == 1 \
                and uses_var(e.a, variables) and not uses_var(e.b, variables):
            coef = _linear(e.a, lane_vars)
            if coef is None:
                return None
            low = {v: const((lane_vars[v] - 1) if c < 0 else 0, v.dtype) for v, c in coef.items()}
            high = {v: const((lane_vars[v] - 1) if c > 0 else 0, v.dtype) for v, c in coef.items()}
            conds.append(Binary("&&", te_binary(">=", substitute(e.a, low), const(0, e.a.dtype)),
                                te_binary("<", substitute(e.a, high), e.b), "bool"))
            return e.a
        return None

    out = mutate_stmt(s, f_expr=on_expr)
    if not conds:
        return s, None
    cond = conds[0]
    for c in conds[1:]:
        cond = Binary("&&", cond, c, "bool")
    return out, cond


def _conjuncts(m: PrimExpr) -> list[PrimExpr]:
    if isinstance(m, Binary) and m.op == "&&":
        return _conjuncts(m.a) + _conjuncts(m.b)
    if isinstance(m, Const) and m.dtype == "bool" and m.value:
        return []
    return [m]

