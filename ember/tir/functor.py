"""Generic traversal of the loop IR: rebuild-on-change mutators and visitors.

`mutate_stmt(s, ...)` rebuilds `s` bottom-up like `mutate_expr` (expr_functor.py, whose functions
this module also offers) does an expression: a statement whose parts did not change is returned
as is (Halide's rule), so `new is old` says whether anything changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .expr import INDEX, BufferLoad, Call, PrimExpr, Var
from .expr_functor import ExprFn, all_same, mutate_expr
from .expr_functor import expr_children as expr_children  # offered here too: one import traverses both
from .expr_functor import free_vars as free_vars
from .expr_functor import substitute as substitute
from .expr_functor import uses_var as uses_var
from .expr_functor import visit_expr as visit_expr
from .stmt import (
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
    Pointer,
    Range,
    SeqStmt,
    Stmt,
    While,
)


def _mut_range(r: Range, f: ExprFn) -> Range:
    nm, ne = mutate_expr(r.min, f), mutate_expr(r.extent, f)
    return r if (nm is r.min and ne is r.extent) else Range(nm, ne)


def _mut_region(br: BufferRegion, f: ExprFn) -> BufferRegion:
    nr = tuple(_mut_range(r, f) for r in br.region)
    return br if all_same(nr, br.region) else BufferRegion(br.buffer, nr)


def mutate_pointer(p: Pointer, ex: Callable) -> Pointer:
    """p with `ex` applied to its offset and indices (p itself where none changes)."""
    o = ex(p.offset)
    idx = None if p.indices is None else tuple(ex(i) for i in p.indices)
    if o is p.offset and (idx is None or all(a is b for a, b in zip(idx, p.indices))):
        return p
    return Pointer(p.buffer, o, idx)


def mutate_stmt(
    s: Stmt,
    f_stmt: Callable[[Stmt], Stmt | None] | None = None,
    f_expr: ExprFn | None = None,
) -> Stmt:
    """Rebuild a statement bottom-up. f_expr rewrites every expression (also block regions and
    iteration domains); f_stmt is called on each statement after its children were rebuilt."""
    fe = f_expr or (lambda n: None)

    def ex(e):
        return mutate_expr(e, fe) if f_expr else e

    def go(s: Stmt) -> Stmt:
        match s:
            case For(v, mn, ext, kind, body, ann):
                nmn, next_, nbody = ex(mn), ex(ext), go(body)
                out = s if all_same((nmn, next_, nbody), (mn, ext, body)) else For(v, nmn, next_, kind, nbody, ann)
            case SeqStmt(stmts):
                ns = tuple(go(x) for x in stmts)
                out = s if all_same(ns, stmts) else SeqStmt(ns)
            case BufferStore(buf, val, idx):
                nv, ni = ex(val), tuple(ex(i) for i in idx)
                out = s if (nv is val and all_same(ni, idx)) else BufferStore(buf, nv, ni)
            case IfThenElse(c, t, e):
                nc, nt, ne = ex(c), go(t), (go(e) if e is not None else None)
                out = s if all_same((nc, nt, ne), (c, t, e)) else IfThenElse(nc, nt, ne)
            case While(c, body):
                nc, nb = ex(c), go(body)
                out = s if (nc is c and nb is body) else While(nc, nb)
            case Evaluate(v):
                nv = ex(v)
                out = s if nv is v else Evaluate(nv)
            case CallRoutine(_, _, reads, writes, scalars):
                nr, nw = (tuple(mutate_pointer(p, ex) for p in ps) for ps in (reads, writes))
                ns = tuple(ex(x) for x in scalars)
                out = s if all_same((*nr, *nw, *ns), (*reads, *writes, *scalars)) else replace(
                    s, reads=nr, writes=nw, scalars=ns)
            case Allocate(buf, body):
                nb = go(body)
                out = s if nb is body else Allocate(buf, nb)
            case Block():
                nbody = go(s.body)
                ninit = go(s.init) if s.init is not None else None
                if f_expr:
                    nivs = tuple(
                        iv if (r := _mut_range(iv.dom, fe)) is iv.dom else IterVar(iv.var, r, iv.kind)
                        for iv in s.iter_vars
                    )
                    nreads = tuple(_mut_region(r, fe) for r in s.reads)
                    nwrites = tuple(_mut_region(r, fe) for r in s.writes)
                else:
                    nivs, nreads, nwrites = s.iter_vars, s.reads, s.writes
                if (
                    nbody is s.body
                    and ninit is s.init
                    and all_same(nivs, s.iter_vars)
                    and all_same(nreads, s.reads)
                    and all_same(nwrites, s.writes)
                ):
                    out = s
                else:
                    out = replace(s, body=nbody, init=ninit, iter_vars=nivs, reads=nreads, writes=nwrites)
            case BlockRealize(vals, pred, block):
                nvals, npred, nblock = tuple(ex(v) for v in vals), ex(pred), go(block)
                out = s if (all_same(nvals, vals) and npred is pred and nblock is block) else BlockRealize(
                    nvals, npred, nblock
                )
            case _:
                raise TypeError(f"unknown statement node {type(s).__name__}")
        if f_stmt is not None:
            r = f_stmt(out)
            if r is not None:
                return r
        return out

    return go(s)


def stmt_children(s: Stmt) -> tuple[Stmt, ...]:
    match s:
        case For(body=body) | Allocate(body=body) | While(body=body):
            return (body,)
        case SeqStmt(stmts):
            return stmts
        case IfThenElse(_, t, e):
            return (t,) if e is None else (t, e)
        case Block():
            return (s.body,) if s.init is None else (s.init, s.body)
        case BlockRealize(block=b):
            return (b,)
    return ()


def visit_stmt(s: Stmt, f: Callable[[Stmt], None]) -> None:
    """Call f on every statement, parents first."""
    stack = [s]
    while stack:
        node = stack.pop()
        f(node)
        stack.extend(reversed(stmt_children(node)))


def collect(s: Stmt, pred: Callable[[Stmt], bool]) -> list:
    """The statements of s (s included) that satisfy pred, in program order."""
    found: list = []
    visit_stmt(s, lambda x: found.append(x) if pred(x) else None)
    return found


def stmt_exprs(s: Stmt) -> tuple[PrimExpr, ...]:
    """The expressions held directly by one statement (not those of its children)."""
    match s:
        case For(_, mn, ext):
            return (mn, ext)
        case BufferStore(_, val, idx):
            return (val, *idx)
        case IfThenElse(c) | Evaluate(c) | While(c):
            return (c,)
        case CallRoutine(_, _, reads, writes, scalars):
            return (*(p.offset for p in reads + writes), *scalars)
        case BlockRealize(vals, pred, _):
            return (*vals, pred)
    return ()


def substitute_stmt(s: Stmt, vmap: dict) -> Stmt:
    if not vmap:
        return s
    return mutate_stmt(s, f_expr=lambda n: vmap.get(n) if isinstance(n, Var) else None)


def checks_indices(s: Stmt) -> bool:
    """Whether s evaluates the INDEX intrinsic (a kernel that does takes a status to report an index
    out of range in: ember.codegen.entry)."""
    found = []
    visit_stmt(s, lambda x: [visit_expr(e, lambda n: found.append(n) if isinstance(n, Call) and n.name == INDEX
                                        else None) for e in stmt_exprs(x)])
    return bool(found)


def touches(s: Stmt, buffer) -> bool:
    """Whether s reads or writes `buffer` (the very object): a load, a store, or a tensorized
    call through its pointers."""
    found = []

    def on_stmt(x):
        if isinstance(x, BufferStore) and x.buffer is buffer or isinstance(x, CallRoutine) and any(
                p.buffer is buffer for p in x.reads + x.writes):
            found.append(x)
        for e in stmt_exprs(x):
            visit_expr(e, lambda y: found.append(y) if isinstance(y, BufferLoad) and y.buffer is buffer else None)

    visit_stmt(s, on_stmt)
    return bool(found)
