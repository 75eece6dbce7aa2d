"""Affine analysis of a block's indices: what an Emitter needs to know about a nest's masks and
accesses before it chooses its loops.

A mask or an offset is affine in a nest's index variables when it is a sum of them times
constants plus terms that do not depend on them. For such masks, `all_true` gives the one scalar
condition under which every mask of a nest holds (its worst corner); `drop_wraps` removes the
`offs % M` that Triton's matmul uses to avoid masks, under the condition that it is the identity;
`contiguous_dim` finds the dimension along which a block of pointers walks memory.
"""

from __future__ import annotations

from ...tir import dtype as tdt
from ...tir.expr import Binary, Cast, Const, PrimExpr, Select, Var, const
from ...tir.expr import binary as te_binary
from ...tir.functor import mutate_stmt, substitute, uses_var
from ...tir.stmt import Stmt
from . import values as V


def contiguous_dim(pointer: V.Block) -> int | None:
    """The dimension along which a block of pointers is contiguous when it is not the last one
    (a transposed tile, `k_ptr + rn[None, :] * D + rd[:, None]`): reading along it and writing
    the local copy across is cheaper than gathering the argument's memory."""
    idx = tuple(Var(f"q{d}") for d in range(len(pointer.shape)))
    coef = linear(pointer.at(idx), dict.fromkeys(idx, 1))
    if coef is None or coef.get(idx[-1], 0) == 1 or pointer.shape[-1] == 1:
        return None
    for d, v in enumerate(idx[:-1]):
        if coef.get(v, 0) == 1 and pointer.shape[d] > 1:
            return d
    return None


def linear(e: PrimExpr, lane_vars) -> dict[Var, int] | None:
    """The coefficients of the lane variables in e, if e is affine in them with constant
    coefficients (the rest does not depend on them); None otherwise."""
    if not uses_var(e, list(lane_vars)):
        return {}
    match e:
        case Var():
            return {e: 1}
        case Cast(dtype, v) if tdt.is_int(dtype):
            return linear(v, lane_vars)
        case Binary("+" | "-", a, b, _):
            la, lb = linear(a, lane_vars), linear(b, lane_vars)
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
                    lx = linear(x, lane_vars)
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
            diff = linear(p.a, lane_vars), linear(p.b, lane_vars)
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
    block is inside the matrix, the wrap is the identity and the offsets stay contiguous. Triton's
    truncating `%` (ops._trunc_mod: the floored one, less m where the signs differ) goes too: where
    0 <= a < m it is the floored one."""
    conds: list[PrimExpr] = []
    variables = list(lane_vars)
    unwrapped: set[int] = set()  # the ids of the `a` of each `a % m` replaced

    def on_expr(e):
        if isinstance(e, Binary) and e.op == "%" and tdt.is_int(e.dtype) and tdt.lanes_of(e.dtype) == 1 \
                and uses_var(e.a, variables) and not uses_var(e.b, variables):
            coef = linear(e.a, lane_vars)
            if coef is None:
                return None
            low = {v: const((lane_vars[v] - 1) if c < 0 else 0, v.dtype) for v, c in coef.items()}
            high = {v: const((lane_vars[v] - 1) if c > 0 else 0, v.dtype) for v, c in coef.items()}
            conds.append(Binary("&&", te_binary(">=", substitute(e.a, low), const(0, e.a.dtype)),
                                te_binary("<", substitute(e.a, high), e.b), "bool"))
            unwrapped.add(id(e.a))
            return e.a
        if isinstance(e, Select) and id(e.f) in unwrapped and isinstance(e.t, Binary) and e.t.op == "-" \
                and e.t.a is e.f:
            return e.f  # Triton's truncating `%` (ops._trunc_mod): the floored one where 0 <= a < m
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

