"""Generic traversal of the loop IR's expressions: a rebuild-on-change mutator and visitors.

`mutate_expr(e, f)` rebuilds `e` bottom-up, calling `f` on every node after its children were
rewritten; `f` returns a replacement or None to keep the node. A node whose children did not
change is returned as is (Halide's rule), so `new is old` says whether anything changed.
Statements' traversal (functor.py) builds on this; the statements themselves (a function's size
variables) use it, so it imports expressions only.
"""

from __future__ import annotations

from collections.abc import Callable

from .expr import (
    Binary,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    Const,
    Not,
    PrimExpr,
    Ramp,
    Select,
    Var,
)

ExprFn = Callable[[PrimExpr], PrimExpr | None]


def all_same(new: tuple, old: tuple) -> bool:
    return all(a is b for a, b in zip(new, old))


def mutate_expr(e: PrimExpr, f: ExprFn) -> PrimExpr:
    match e:
        case Var() | Const():
            out = e
        case Binary(op, a, b, dtype):
            na, nb = mutate_expr(a, f), mutate_expr(b, f)
            out = e if (na is a and nb is b) else Binary(op, na, nb, dtype)
        case Not(a, dtype):
            na = mutate_expr(a, f)
            out = e if na is a else Not(na, dtype)
        case Select(c, t, fv, dtype):
            nc, nt, nf = mutate_expr(c, f), mutate_expr(t, f), mutate_expr(fv, f)
            out = e if all_same((nc, nt, nf), (c, t, fv)) else Select(nc, nt, nf, dtype)
        case Cast(dtype, v):
            nv = mutate_expr(v, f)
            out = e if nv is v else Cast(dtype, nv)
        case Call(name, args, dtype):
            nargs = tuple(mutate_expr(a, f) for a in args)
            out = e if all_same(nargs, args) else Call(name, nargs, dtype)
        case BufferLoad(buf, idx, dtype):
            nidx = tuple(mutate_expr(i, f) for i in idx)
            out = e if all_same(nidx, idx) else BufferLoad(buf, nidx, dtype)
        case Ramp(base, stride, lanes, dtype):
            nb, ns = mutate_expr(base, f), mutate_expr(stride, f)
            out = e if (nb is base and ns is stride) else Ramp(nb, ns, lanes, dtype)
        case Broadcast(v, lanes, dtype):
            nv = mutate_expr(v, f)
            out = e if nv is v else Broadcast(nv, lanes, dtype)
        case _:
            raise TypeError(f"unknown expression node {type(e).__name__}")
    r = f(out)
    return out if r is None else r


def expr_children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    match e:
        case Binary(_, a, b, _):
            return (a, b)
        case Not(a, _) | Cast(_, a) | Broadcast(a, _, _):
            return (a,)
        case Select(c, t, fv, _):
            return (c, t, fv)
        case Call(_, args, _):
            return args
        case BufferLoad(_, idx, _):
            return idx
        case Ramp(base, stride, _, _):
            return (base, stride)
    return ()


def visit_expr(e: PrimExpr, f: Callable[[PrimExpr], None]) -> None:
    """Call f on every node of e, children first."""
    stack = [(e, False)]
    while stack:
        node, done = stack.pop()
        if done:
            f(node)
            continue
        stack.append((node, True))
        for c in reversed(expr_children(node)):
            stack.append((c, False))


def any_node(e: PrimExpr, pred: Callable[[PrimExpr], bool]) -> bool:
    """Whether some node of e satisfies pred, looked for until the first that does (in no
    particular order: visit_expr's children-first order costs a second visit of each node)."""
    stack = [e]
    while stack:
        node = stack.pop()
        if pred(node):
            return True
        stack.extend(expr_children(node))
    return False


def free_vars(e: PrimExpr) -> set[Var]:
    out: set[Var] = set()
    visit_expr(e, lambda n: out.add(n) if isinstance(n, Var) else None)
    return out


def uses_var(e: PrimExpr, vs) -> bool:
    vs = set(vs)
    return any_node(e, lambda n: isinstance(n, Var) and n in vs)


def substitute(e: PrimExpr, vmap: dict) -> PrimExpr:
    """Replace variables (keys of vmap) by expressions."""
    if not vmap:
        return e
    return mutate_expr(e, lambda n: vmap.get(n) if isinstance(n, Var) else None)
