"""The CPU's Emitter: block operations as SIMD loop nests under one OpenMP loop.

Every block statement (a load, a store, a value kept in memory) is a loop nest over the block's
shape whose innermost loop is vectorized (in chunks of one SIMD register). A nest whose loads
or stores are masked is versioned: where every mask is a comparison affine in the block's
indices (`offs < n`, `rows[:, None] < M`), the test that the whole block is in bounds is one
scalar condition, and the block runs unmasked and vectorized when it holds; otherwise (the
ragged edge of the data) a scalar loop tests each element. Reductions accumulate in one register
of partial results per row; `tl.dot` is a register-tiled micro-kernel over blocks kept in L1
(an MR x NR accumulator tile in vector registers, a broadcast of A times a vector of B per k), as
ember's GEMM schedule does. The programs of the grid are one parallel loop.
"""

from __future__ import annotations

from collections.abc import Callable

from ...target import Target
from ...tir import dtype as tdt
from ...tir.expr import Binary, Buffer, BufferLoad, Cast, PrimExpr, Var, const, select
from ...tir.expr import binary as te_binary
from ...tir.stmt import Allocate, BufferStore, For, IfThenElse, Stmt, seq
from . import values as V
from .affine import all_true, drop_wraps
from .emitter import Body, Deferred, Emitter, buffer_block, buffer_value


class VectorEmitter(Emitter):
    """Loop nests vectorized for the SIMD registers of `target` (ember.target.Target)."""

    def __init__(self, target: Target, debug: bool, num_warps: int = 4, num_stages: int = 3):
        """num_warps, num_stages: a GPU's warps per program and stages of copies, nothing on the CPU."""
        super().__init__(debug)
        self.vector_bytes = target.vector_bytes
        self.registers = target.vector_registers
        self.lane_vars: dict[Var, int] = {}  # the nests' loop variables and their extents

    def lanes(self, dtype: str) -> int:
        return max(1, self.vector_bytes // max(1, tdt.bits(dtype) // 8))

    # -- loop nests --------------------------------------------------------------------------------
    def nest(self, shape: tuple[int, ...], body: Callable[[tuple[PrimExpr, ...]], Stmt | None], *,
             vector: bool = True, lanes: int = 16, inner: int | None = None) -> Stmt | None:
        """The innermost loop is vectorized in chunks of `lanes` where they divide it, else
        whole; the others are serial."""
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
        """Versioned as the module doc says: the scalar nest with every mask, and, under one
        scalar test where the masks allow one, the unmasked vector nest."""
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

    # -- reductions ------------------------------------------------------------------------------
    def reduce(self, x: V.Block, axis: int, combine: Callable, init: PrimExpr, dtype) -> V.Block | V.Scalar:
        """Along the last axis: a register of partial results per row, folded at its end;
        along another: the vectorized nest accumulating into the output."""
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
        return buffer_value(out, out_shape, dtype)

    def arg_reduce(self, x: V.Block, axis: int, better: Callable, init: PrimExpr, index_dtype):
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
        return buffer_value(val, out_shape, x.dtype), buffer_value(arg, out_shape, index_dtype)

    def scan(self, x: V.Block, axis: int, combine: Callable, dtype, reverse: bool) -> V.Block:
        """A serial loop along the axis, inside the loops of the other axes."""
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
    def dot(self, a: Buffer, b: Buffer, c: Buffer, m: int, n: int, k: int, precision: str = "ieee") -> None:
        """The micro-kernel (the module doc): float32 products at any precision (no TF32 here)."""
        lanes = self.lanes(c.dtype)
        nr = min(n, 2 * lanes)
        # accumulators, a broadcast of A and the vectors of B within the target's vector registers
        mr = 8
        while mr > 1 and (mr * (nr // lanes or 1) + (nr // lanes or 1) + 1 > self.registers or m % mr):
            mr //= 2
        i0, j0, kk, ii, jj = Var("i0"), Var("j0"), Var("kk"), Var("ii"), Var("jj")
        tile = Buffer(self.name("acc"), (const(mr * nr),), c.dtype, scope="local")
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



    # -- deferred loads ------------------------------------------------------------------------------
    def read_in(self, d: Deferred) -> Buffer:
        """The versioned nest of the load; a 2-D block contiguous along its first dimension whose
        sizes the lanes divide is read, unmasked, by square register tiles (`_transposed`)."""
        buf = self.local("ld", d.shape, d.dtype)
        lanes = self.lanes(d.dtype)
        transposed = d.inner == 0 and len(d.shape) == 2 and lanes > 1 and all(n % lanes == 0 for n in d.shape)
        fast = (lambda: self._transposed(d, buf, lanes)) if transposed else None
        self.versioned(d.shape, d.into(buf), lanes, d.inner, fast)
        return buf

    def _transposed(self, d: Deferred, buf: Buffer, lanes: int) -> Stmt:
        """The unmasked read of a 2-D block whose memory is contiguous along its first dimension
        (a transposed operand: `k` of `tl.dot(q, k)` loaded as K[n, d] viewed (d, n)), by square
        tiles of `lanes`: each tile's rows are vector loads along memory into registers, and its
        columns, gathered from the registers (a transpose in shuffles), are vector stores into buf,
        where a lane-by-lane copy would scatter every element."""
        rows, cols = d.shape
        t0, t1, r, v = Var("t0"), Var("t1"), Var("r"), Var("v")
        for var, n in ((t0, rows // lanes), (t1, cols // lanes), (r, lanes), (v, lanes)):
            self.lane_vars[var] = n
        tile = Buffer(self.name("tr"), (const(lanes * lanes),), d.dtype, scope="local")
        # tile[r, v] = the element (t0 * L + v, t1 * L + r): row r of the tile is along memory
        fill = For(r, const(0), const(lanes), "unrolled", For(v, const(0), const(lanes), "vectorized", BufferStore(
            tile, d.direct((t0 * lanes + v, t1 * lanes + r), True), (r * lanes + v,))))
        spill = For(r, const(0), const(lanes), "unrolled", For(v, const(0), const(lanes), "vectorized", BufferStore(
            buf, BufferLoad(tile, (v * lanes + r,), d.dtype), ((t0 * lanes + r) * cols + t1 * lanes + v,))))
        body = Allocate(tile, seq(fill, spill))
        return For(t0, const(0), const(rows // lanes), "serial", For(t1, const(0), const(cols // lanes), "serial",
                                                                      body))

    # -- the grid ----------------------------------------------------------------------------------
    def kernel(self, pid: Var, programs: PrimExpr) -> Stmt:
        """One parallel loop over the programs; each has its own local buffers."""
        return For(pid, const(0), programs, "parallel", self.allocated(seq(*self.lists[0])))
