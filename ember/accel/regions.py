"""The rows a loop nest walks: a nest that copies or computes a tile walks, on each side (a
buffer and its flat index), rows of consecutive elements with one row stride, which is what the
device's DMA and ALU take; anything else is a ScheduleError naming the region."""

from __future__ import annotations

from ..errors import ScheduleError
from ..tir.arith import Analyzer
from ..tir.expr import PrimExpr, Var, const
from ..tir.expr_functor import free_vars, substitute
from ..tir.stmt import For


def rows_of(accel: str, loops: list[For], sides: list, where: str, unit: str):
    """(rows, cols, each side's first element, each side's row stride) of a nest that walks
    rows of consecutive elements on every side (buffer, flat index); else a ScheduleError."""
    ana = Analyzer()
    for lp in loops:
        ana.bind_range(lp.loop_var, lp.min, lp.extent)
    dims = []  # (extent, each side's coefficient), outermost first
    for lp in loops:
        cs = tuple(_coeff(idx, lp.loop_var, ana) for _, idx in sides)
        if None in cs:
            bad = next(idx for (_, idx), c in zip(sides, cs) if c is None)
            raise ScheduleError(f"{where}: {accel}'s {unit} walks affine regions; the index {bad} is "
                                f"not affine in {lp.loop_var.name}")
        dims.append((lp.extent, cs))
    dims = _merge(dims, ana)
    if len(dims) > 2 or (dims and not all(_is(c, 1, ana) for c in dims[-1][1])):
        shape = " x ".join(f"{ext} (stride {', '.join(f'{c} in {b.name}' for (b, _), c in zip(sides, cs))})"
                           for ext, cs in dims)
        raise ScheduleError(f"{where} is not a 2-D {unit}: {accel} walks rows of consecutive "
                            f"elements, with one row stride on each side; this region is {shape}. Stage a "
                            f"tile whose innermost axis is the tensor's last one")
    zero = {lp.loop_var: lp.min for lp in loops}
    bases = tuple(ana.simplify(substitute(idx, zero)) for _, idx in sides)
    if len(dims) == 2:
        return dims[0][0], dims[1][0], bases, tuple(ana.simplify(c) for c in dims[0][1])
    cols = dims[0][0] if dims else const(1)
    return const(1), cols, bases, (cols,) * len(sides)


def _coeff(index: PrimExpr, v: Var, ana: Analyzer) -> PrimExpr | None:
    """The constant step of `index` per step of `v`, or None where it is not affine in v."""
    step = ana.simplify(substitute(index, {v: v + 1}) - index)
    if v in free_vars(step):
        return None
    return step


def _is(e: PrimExpr, value: int, ana: Analyzer) -> bool:
    return ana.can_prove_equal(e, value)


def _merge(dims: list, ana: Analyzer) -> list:
    """Drop loops of one iteration and fuse an outer loop into the next where every side is
    contiguous across them (a tile that is one run of memory on each side)."""
    out: list = []
    for ext, cs in (d for d in dims if not _is(d[0], 1, ana)):
        if out and all(_is(oc, ext * c, ana) for oc, c in zip(out[-1][1], cs)):
            out[-1] = (ana.simplify(out[-1][0] * ext), cs)
        else:
            out.append((ext, cs))
    return out
