"""Hints, checks and debugging: tl.multiple_of and the other hints (nothing to compile),
tl.static_assert, tl.device_assert and the debug mode's bounds checks (each failed check a site
of the status buffer), tl.debug_barrier, tl.static_print and tl.device_print."""

from __future__ import annotations

from ....tir import expr as te
from ....tir.expr import BufferLoad, Call, PrimExpr, cast, const
from ....tir.stmt import BufferStore, Evaluate, IfThenElse
from ...language import dtypes as tld
from .. import values as V
from ..values import TileTypeError
from .calls import Calls


class Checks(Calls):
    """The status buffer's sites, the checks and the debugging builtins (the module doc)."""

    def _check(self, base, off: PrimExpr) -> PrimExpr | None:
        """Debug mode: the condition that off is inside its argument's span (None otherwise)."""
        if not self.em.debug:
            return None
        lo, hi = self.span[base]
        return te.binary("&&", te.binary(">=", off, lo), te.binary("<", off, hi))

    def _site(self, text: str) -> PrimExpr:
        self.sites.append(text)
        return const(len(self.sites), "int64")

    def _fail(self, site) -> IfThenElse:
        """Record the failed check `site` unless one is recorded (the first one a program meets)."""
        first = te.binary("==", BufferLoad(self.status, (const(0),), "int64"), const(0))
        return IfThenElse(first, BufferStore(self.status, site, (const(0),)))

    def b_multiple_of(self, input, values):
        return input

    def b_max_contiguous(self, input, values):
        return input

    def b_max_constancy(self, input, values):
        return input

    def b_debug_barrier(self):
        self.frontend.flush()
        self.em.barrier()

    def b_static_assert(self, cond, msg=""):
        if V.is_runtime(cond):
            raise TileTypeError("tl.static_assert needs a constexpr condition")
        if not cond:
            raise TileTypeError(f"static_assert failed: {msg}")

    def b_static_print(self, *values, sep=" ", end="\n", file=None, flush=False):
        print(*values, sep=sep, end=end, file=file, flush=flush)

    def b_device_assert(self, cond, msg="", mask=None):
        self.frontend.flush()
        if not V.is_runtime(cond):
            if not cond:
                raise TileTypeError(f"device_assert fails for every program: {msg}")
            return
        site = self._site(f"device_assert failed: {msg} at {self.frontend.where()}")
        shape = cond.shape

        def body(idx):
            c = V.convert(V.element(cond, idx), cond.dtype, tld.int1)
            if mask is not None and V.is_runtime(mask):
                c = te.binary("||", c, negated(V.convert(V.element(mask, idx), mask.dtype, tld.int1)))
            return IfThenElse(negated(c), self._fail(site))

        self.em.emit(self.em.nest(shape, body, vector=False))

    def b_device_print(self, prefix, *args, hex=False):
        self.frontend.flush()
        for a in args:
            if not V.is_runtime(a):
                continue
            shape = a.shape

            def body(idx, a=a):
                # one line per element: the prefix, the program id (3), the element's index, its value
                pid = [cast("int64", x) for x in self.program]
                where = [cast("int64", i) for i in idx]
                return Evaluate(Call(f"{te.PRINT} {prefix}", (*pid, *where, V.element(a, idx)), "int32"))

            self.em.emit(self.em.nest(shape, body, vector=False))


def negated(c: PrimExpr) -> PrimExpr:
    """not c (a condition of the loop IR)."""
    return te.Not(c, c.dtype)
