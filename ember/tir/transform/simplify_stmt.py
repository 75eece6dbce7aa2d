"""Statement simplification: every expression simplified with loop and block variables bound to
their ranges; provably false guards, empty loops and empty statements dropped; serial loops of
extent 1 inlined; conditions of an `if` tighten the bounds of its branches.
"""

from __future__ import annotations

from dataclasses import replace

from .. import dtype as dt
from ..arith import Analyzer
from ..expr import Binary, Const, Not, PrimExpr, Var
from ..functor import mutate_pointer, substitute_stmt
from ..stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    CallRoutine,
    Evaluate,
    For,
    IfThenElse,
    IterVar,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    While,
    seq,
)


def _empty() -> SeqStmt:
    return SeqStmt(())


def _is_empty(s: Stmt | None) -> bool:
    return isinstance(s, SeqStmt) and not s.stmts


def simplify_stmt(s: Stmt, analyzer: Analyzer | None = None) -> Stmt:
    """Simplify every expression of s, with loop and block variables bound to their ranges;
    drop provably false guards and empty loops, inline serial loops of extent 1. Returns s
    itself when nothing changed."""
    return _StmtSimplifier(analyzer or Analyzer()).visit(s)


def simplify_body(func: PrimFunc) -> PrimFunc:
    """The lowering pass: `simplify_stmt` over the function's body."""
    return func.with_body(simplify_stmt(func.body))


class _StmtSimplifier:
    def __init__(self, ana: Analyzer):
        self.ana = ana

    def ex(self, e: PrimExpr) -> PrimExpr:
        return self.ana.simplify(e)

    def range_(self, r: Range) -> Range:
        mn, ext = self.ex(r.min), self.ex(r.extent)
        return r if (mn is r.min and ext is r.extent) else Range(mn, ext)

    def region(self, br: BufferRegion) -> BufferRegion:
        rs = tuple(map(self.range_, br.region))
        return br if _same(rs, br.region) else BufferRegion(br.buffer, rs)

    def visit(self, s: Stmt) -> Stmt:
        match s:
            case For(v, mn, ext, kind, body, ann):
                return self._for(s, v, self.ex(mn), self.ex(ext), kind, body, ann)
            case SeqStmt(stmts):
                new = tuple(map(self.visit, stmts))
                return s if _same(new, stmts) else seq(*new)
            case BufferStore(buf, val, idx):
                nv, ni = self.ex(val), tuple(map(self.ex, idx))
                return s if (nv is val and _same(ni, idx)) else BufferStore(buf, nv, ni)
            case IfThenElse(c, t, e):
                return self._if(s, self.ex(c), t, e)
            case While(c, body):
                nc, nb = self.ex(c), self.visit(body)
                return s if (nc is c and nb is body) else While(nc, nb)
            case Evaluate(v):
                nv = self.ex(v)
                return s if nv is v else Evaluate(nv)
            case Allocate(buf, body):
                nb = self.visit(body)
                return s if nb is body else Allocate(buf, nb)
            case CallRoutine(_, _, reads, writes, scalars):
                nr, nw = ([mutate_pointer(p, self.ex) for p in ps] for ps in (reads, writes))
                return replace(s, reads=tuple(nr), writes=tuple(nw), scalars=tuple(map(self.ex, scalars)))
            case Block():
                return self._block(s)
            case BlockRealize(vals, pred, block):
                nvals, npred, nblock = tuple(map(self.ex, vals)), self.ex(pred), self.visit(block)
                same = _same(nvals, vals) and npred is pred and nblock is block
                return s if same else BlockRealize(nvals, npred, nblock)
        raise TypeError(f"unknown statement node {type(s).__name__}")

    def _for(self, s: For, v, mn, ext, kind, body, ann) -> Stmt:
        hi = self.ana.const_int_bound(ext)[1]
        if hi is not None and hi <= 0:
            return _empty()
        if isinstance(ext, Const) and ext.value == 1 and kind in ("serial", "unrolled") and not ann:
            return self.visit(substitute_stmt(body, {v: mn}))
        with self.ana.scope():
            self.ana.bind_range(v, mn, ext)
            nbody = self.visit(body)
        if _is_empty(nbody):
            return _empty()
        if mn is s.min and ext is s.extent and nbody is body:
            return s
        return For(v, mn, ext, kind, nbody, ann)

    def _if(self, s: IfThenElse, c: PrimExpr, then: Stmt, other: Stmt | None) -> Stmt:
        if isinstance(c, Const):
            if c.value:
                return self.visit(then)
            return self.visit(other) if other is not None else _empty()
        with self.ana.scope():
            self._assume(c)
            nt = self.visit(then)
        ne = None
        if other is not None:
            with self.ana.scope():
                self._assume(self.ex(Not(c, c.dtype)))
                ne = self.visit(other)
            ne = None if _is_empty(ne) else ne
        if _is_empty(nt):
            return _empty() if ne is None else IfThenElse(self.ex(Not(c, c.dtype)), ne)
        if c is s.cond and nt is s.then_case and ne is s.else_case:
            return s
        return IfThenElse(c, nt, ne)

    def _assume(self, c: PrimExpr) -> None:
        """Tighten variable bounds by a condition known to hold (`v < 10`, `a && b`)."""
        match c:
            case Binary("&&", a, b, _):
                self._assume(a)
                self._assume(b)
            case Binary(op, Var() as v, Const(k), _) if op in ("<", "<=", ">", ">=", "==") and \
                    dt.is_int(v.dtype):
                lo, hi = self.ana._var_bound(v)
                if op in ("<", "<=", "=="):
                    hi = min(hi, k - 1 if op == "<" else k)
                if op in (">", ">=", "=="):
                    lo = max(lo, k + 1 if op == ">" else k)
                self.ana._bounds[v] = (lo, hi)

    def _block(self, s: Block) -> Stmt:
        ivs = tuple(
            iv if (r := self.range_(iv.dom)) is iv.dom else IterVar(iv.var, r, iv.kind)
            for iv in s.iter_vars
        )
        with self.ana.scope():
            for iv in ivs:
                self.ana.bind_range(iv.var, iv.dom.min, iv.dom.extent)
            reads, writes = tuple(map(self.region, s.reads)), tuple(map(self.region, s.writes))
            body = self.visit(s.body)
            init = self.visit(s.init) if s.init is not None else None
        if _same((*ivs, *reads, *writes, body, init), (*s.iter_vars, *s.reads, *s.writes, s.body, s.init)):
            return s
        return replace(s, iter_vars=ivs, reads=reads, writes=writes, body=body, init=init)


def _same(new: tuple, old: tuple) -> bool:
    return all(a is b for a, b in zip(new, old))
