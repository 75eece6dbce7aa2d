"""The CUDA Emitter's reductions and scans: a fold's running value in a thread's own register.

A reduction to a scalar is two phases: each thread folds its share into a shared partial, then
every thread folds the partials (which the CUDA target turns into warp shuffles, ember.cuda.warp,
in a block of one warp). A reduction keeping other axes gives each output element to one thread,
as do scans and arg-reductions; a fold keeps its running value in the thread's register
(`ThreadEmitter.register`), so no barrier falls in a loop only some threads run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ....tir.expr import Buffer, BufferLoad, Cast, PrimExpr, Var, const, select
from ....tir.expr import binary as te_binary
from ....tir.stmt import Allocate, BufferStore, For, IfThenElse, Stmt, seq
from .. import values as V
from ..emitter import buffer_block, buffer_value
from .threads import SPREAD, ThreadEmitter


class Reductions(ThreadEmitter):
    """reduce, arg_reduce and scan over a block's threads (the module doc)."""

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
        j, v, r = Var("j"), Var("v"), Var("r")
        acc, at, now = self.register("a", tdtype)
        vec = self.chunk(n, n)
        steps = -(-n // (width * vec))
        flat: list[PrimExpr] = []

        def share(t):  # (a 1-D block's elements as `_spread` gives them: chunks of vec, threads apart)
            q = t if steps == 1 else j * width + t
            e = q if vec == 1 else q * vec + v
            flat.append(V.flat_index((n,), (e,)))
            step = BufferStore(acc, combine(now, value((e,))), at)
            if n % width:
                step = IfThenElse(te_binary("<", e, const(n)), step)
            if vec > 1:
                step = For(v, const(0), const(vec), "unrolled", step)
            fold = step if steps == 1 else For(j, const(0), const(steps), "serial", step)
            return Allocate(acc, seq(BufferStore(acc, init, at), fold, BufferStore(part, now, (t,))))

        first = self.on_threads(width, share)
        own = j if vec == 1 else j * vec + v if steps > 1 else v
        self._spreads.append((((n,), (0,), vec), flat[0], const(0) if vec == steps == 1 else own, steps * vec))
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
