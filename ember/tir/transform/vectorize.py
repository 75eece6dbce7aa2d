"""Vectorization: a loop marked "vectorized" of constant extent n becomes one iteration over
n-lane vectors. Its variable becomes ramp(0, 1, n); ramps combine with scalars (ramp + x is
ramp(x, 1), ramp * c is ramp(0, c)), so a unit-stride access becomes a contiguous vector load
or store, and everything else becomes vector arithmetic. Loops inside stay loops (their body is
vectorized: the GEMM's k loop inside a vectorized j loop).

A select whose condition differs per lane evaluates both branches for every lane, so each load
in them runs where the scalar loop skipped it. That is safe for the kernel's own local scratch
only where the index is proved inside the buffer for every lane, every loop variable bound to
its loop's range (tir.arith): a register tile read by its epilogue is, but not the `cache_read`
copy of a padded input, whose guard is what keeps `h - 1` at h = 0 out of it. Loads of other
memory may be speculated only at an address that does not vary by lane.

A body that cannot be vectorized safely (a guard that differs per lane, a store whose address
does not depend on the loop, a per-lane select around a load it may not speculate) keeps its
loop, marked for the C compiler's own vectorizer (`#pragma omp simd`). A loop whose whole body is
one guard of comparisons affine in its variable (the tail of a row that vectors do not divide:
`if (k0 * 16 + k1 < 3199)`) is tested at its first and last iteration instead: the lanes that
pass such a guard form an interval, so when both ends pass, every lane does, and the vector body
runs unguarded; the loop runs as before only where they do not (the last vector of the row):

    for k1 in vectorized(16):                 if (k0 * 16 < 3199 && k0 * 16 + 15 < 3199):
        if (k0 * 16 + k1 < 3199): body  ->        body as one vector
                                              else: for k1 in vectorized(16): if (...): body
"""

from __future__ import annotations

import functools
import operator
from dataclasses import replace

from ..arith import Analyzer
from ..dtype import bits, is_int, lanes_of, with_lanes
from ..expr import (
    COMPARE_OPS,
    INDEX,
    Binary,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    Not,
    PrimExpr,
    Ramp,
    Select,
    Var,
    as_int,
    binary,
    const,
)
from ..expr_functor import substitute
from ..functor import collect, mutate_stmt, substitute_stmt, uses_var, visit_expr, visit_stmt
from ..stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, PrimFunc, SeqStmt, Stmt, seq
from ..structural import structural_key


class CannotVectorize(Exception):
    pass


def _vec(e: PrimExpr) -> bool:
    return lanes_of(e.dtype) > 1


def _bcast(e: PrimExpr, n: int) -> PrimExpr:
    return e if _vec(e) else Broadcast(e, n, with_lanes(e.dtype, n))


class _Vectorizer:
    """Vectorizes a body over `var` as `lanes` lanes; `ana` knows the ranges of the function's
    loop variables, var's included."""

    def __init__(self, var: Var, lanes: int, ana: Analyzer):
        self.var, self.n, self.ana = var, lanes, ana

    def expr(self, e: PrimExpr) -> PrimExpr:
        n = self.n
        if not uses_var(e, [self.var]):
            return e
        match e:
            case Var():
                return Ramp(const(0, e.dtype), const(1, e.dtype), n, with_lanes(e.dtype, n))
            case Binary(op, a, b, dtype):
                va, vb = self.expr(a), self.expr(b)
                ramp = self._ramp_arith(op, va, vb)
                if ramp is not None:
                    return ramp
                return Binary(op, _bcast(va, n), _bcast(vb, n), with_lanes(dtype, n))
            case BufferLoad(buf, (idx,), dtype):
                return BufferLoad(buf, (self.expr(idx),), with_lanes(dtype, n))
            case Select(c, t, f, dtype):
                vc, vt, vf = self.expr(c), self.expr(t), self.expr(f)
                if _vec(vc) and not (self._speculable(t) and self._speculable(f)):
                    raise CannotVectorize("a per-lane select guards a load that may leave its buffer")
                return Select(vc, _bcast(vt, n), _bcast(vf, n), with_lanes(dtype, n))
            case Cast(dtype, v):
                return Cast(with_lanes(dtype, n), self.expr(v))
            case Not(a, dtype):
                return Not(self.expr(a), with_lanes(dtype, n))
            case Call(name, _, _) if name == INDEX:
                raise CannotVectorize("an index checked per lane")
            case Call(name, args, dtype):
                return Call(name, tuple(_bcast(self.expr(a), n) for a in args), with_lanes(dtype, n))
        raise CannotVectorize(f"cannot vectorize {type(e).__name__}")

    def _ramp_arith(self, op, a, b):
        if not is_int(a.dtype):
            return None
        if op in ("+", "-"):
            if isinstance(a, Ramp) and not _vec(b):
                return Ramp(a.base + b if op == "+" else a.base - b, a.stride, a.lanes, a.dtype)
            if isinstance(b, Ramp) and not _vec(a):
                if op == "+":
                    return Ramp(a + b.base, b.stride, b.lanes, b.dtype)
                return Ramp(a - b.base, const(0) - b.stride, b.lanes, b.dtype)
            if isinstance(a, Ramp) and isinstance(b, Ramp):
                base = a.base + b.base if op == "+" else a.base - b.base
                stride = a.stride + b.stride if op == "+" else a.stride - b.stride
                return Ramp(base, stride, a.lanes, a.dtype)
        if op == "*":
            if isinstance(a, Ramp) and not _vec(b):
                return Ramp(a.base * b, a.stride * b, a.lanes, a.dtype)
            if isinstance(b, Ramp) and not _vec(a):
                return Ramp(a * b.base, a * b.stride, b.lanes, b.dtype)
        return None

    def stmt(self, s: Stmt) -> Stmt:
        match s:
            case BufferStore(buf, value, (idx,)):
                vi, vv = self.expr(idx), self.expr(value)
                if not _vec(vi):
                    raise CannotVectorize("a store whose address does not depend on the vectorized loop")
                return BufferStore(buf, _bcast(vv, self.n), (vi,))
            case SeqStmt(stmts):
                return SeqStmt(tuple(self.stmt(x) for x in stmts))
            case For(v, mn, ext, kind, body, ann):
                if uses_var(mn, [self.var]) or uses_var(ext, [self.var]):
                    raise CannotVectorize("an inner loop's bounds depend on the vectorized loop")
                return For(v, mn, ext, "serial" if kind == "vectorized" else kind, self.stmt(body), ann)
            case IfThenElse(c, t, e):
                vc = self.expr(c)
                if _vec(vc):
                    raise CannotVectorize("a guard that differs per lane")
                return IfThenElse(vc, self.stmt(t), self.stmt(e) if e is not None else None)
            case Allocate() | Evaluate():
                raise CannotVectorize(type(s).__name__)
        raise CannotVectorize(type(s).__name__)

    def _speculable(self, branch: PrimExpr) -> bool:
        """Whether every load of a per-lane select's branch (scalar, before vectorization) may
        run for every lane: a load of local scratch proved inside it, or of other memory at an
        address that does not vary by lane."""
        loads: list[BufferLoad] = []
        visit_expr(branch, lambda x: loads.append(x) if isinstance(x, BufferLoad) else None)
        return all(self._inside(x) if x.buffer.scope == "local" else not uses_var(x, [self.var]) for x in loads)

    def _inside(self, load: BufferLoad) -> bool:
        """Whether the load's indices lie inside its buffer for all values of the variables (a
        flattened index against the buffer's element count)."""
        shape = load.buffer.shape
        dims = shape if len(load.indices) == len(shape) else (functools.reduce(operator.mul, shape),)
        return all(self.ana.can_prove(i >= 0) and self.ana.can_prove(i < d) for i, d in zip(load.indices, dims))


def _loop_ranges(body: Stmt) -> Analyzer:
    """An analyzer that knows the range of every loop variable of body; a variable heading loops
    of different ranges (copies of an unrolled body) is left unbounded."""
    ana, ranges = Analyzer(), {}
    for loop in collect(body, lambda x: isinstance(x, For)):  # parents first: their ranges are known
        v, r = loop.loop_var, (structural_key(loop.min), structural_key(loop.extent))
        if ranges.setdefault(v, r) == r:
            ana.bind_range(v, loop.min, loop.extent)
        else:
            ranges[v] = None
            ana.bind(v, None, None)
    return ana


def _widest_element(s: Stmt) -> int:
    """Bytes of the widest element type stored in s."""
    widths = [1]
    visit_stmt(s, lambda x: widths.append(bits(x.buffer.dtype) // 8) if isinstance(x, BufferStore) else None)
    return max(widths)


def vectorize(func: PrimFunc, vector_bytes: int | None = None) -> PrimFunc:
    """Vectorize the loops marked "vectorized". With `vector_bytes` (the SIMD register size of
    the target), a loop wider than one register becomes one vector per register, unrolled, the
    last one narrower where the registers do not divide it (24 lanes: 16 + 8): compilers handle
    vectors of the native width far better than wider ones."""

    ana = _loop_ranges(func.body)

    def f(s: Stmt):
        if not (isinstance(s, For) and s.kind == "vectorized"):
            return None
        n = as_int(s.extent)
        if n is None or n < 2:
            return replace(s, kind="serial")
        width = max(1, vector_bytes // _widest_element(s.body)) if vector_bytes else n
        try:
            if width >= n:
                return _vector_body(s.loop_var, n, s.body, ana)
            return seq(*(_vector_chunk(s, start, min(width, n - start), ana) for start in range(0, n, width)))
        except CannotVectorize:
            return _interval_guard(s, n, ana, f)

    return func.with_body(mutate_stmt(func.body, f_stmt=f))


def _interval_guard(loop: For, n: int, ana: Analyzer, vectorize_loop) -> Stmt:
    """A loop whose body is one guard that passes an interval of its iterations: the guard tested
    at the first and the last, the body vectorized under it, the loop as it was else (see the
    module's docstring); the loop as it was when that does not apply."""
    guard = loop.body
    if not isinstance(guard, IfThenElse) or guard.else_case is not None or not _affine_in(guard.cond, loop, n, ana):
        return loop
    fast = vectorize_loop(replace(loop, body=guard.then_case))
    if fast is None or (isinstance(fast, For) and fast.kind == "vectorized"):
        return loop
    var = loop.loop_var  # (from 0, as the vectorizer's ramps are)
    ends = binary("&&", substitute(guard.cond, {var: const(0, var.dtype)}),
                  substitute(guard.cond, {var: const(n - 1, var.dtype)}))
    return IfThenElse(ends, fast, loop)


def _affine_in(cond: PrimExpr, loop: For, n: int, ana: Analyzer) -> bool:
    """Whether cond is a conjunction of comparisons (not ==, !=) whose sides are affine in the
    loop's variable (ramps once vectorized) and read no memory."""
    if isinstance(cond, Binary) and cond.op == "&&":
        return _affine_in(cond.a, loop, n, ana) and _affine_in(cond.b, loop, n, ana)
    if not (isinstance(cond, Binary) and cond.op in COMPARE_OPS[2:]):
        return False
    loads: list = []
    visit_expr(cond, lambda x: loads.append(x) if isinstance(x, BufferLoad) else None)
    if loads:
        return False
    with ana.scope():
        ana.bind(loop.loop_var, 0, n - 1)
        vectorizer = _Vectorizer(loop.loop_var, n, ana)
        try:
            sides = [vectorizer.expr(cond.a), vectorizer.expr(cond.b)]
        except CannotVectorize:
            return False
    return all(isinstance(x, Ramp) or not _vec(x) for x in sides)


def _vector_chunk(loop: For, start: int, lanes: int, ana: Analyzer) -> Stmt:
    """Iterations start .. start + lanes - 1 of a vectorized loop, as one vector of `lanes`."""
    if lanes == 1:
        return substitute_stmt(loop.body, {loop.loop_var: const(start, loop.loop_var.dtype)})
    inner = Var(loop.loop_var.name)
    return _vector_body(inner, lanes, substitute_stmt(loop.body, {loop.loop_var: inner + start}), ana)


def _vector_body(var: Var, lanes: int, body: Stmt, ana: Analyzer) -> Stmt:
    """body, in which var runs over 0 .. lanes - 1, as one vector of `lanes`."""
    with ana.scope():
        ana.bind(var, 0, lanes - 1)
        return _Vectorizer(var, lanes, ana).stmt(body)
