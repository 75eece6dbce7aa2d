"""det(x): the determinant of each square matrix of x (..., n, n) -> (...) (ONNX Det,
numpy.linalg.det, torch.linalg.det).

The kernel is an LU factorization with partial pivoting (as LAPACK's getrf, which NumPy and
torch call): for each column k, the row at or below k with the largest magnitude in that column
is swapped up (each swap flips the sign), the determinant is multiplied by the pivot, and the rows
below are eliminated. te has no loop-carried state, so it is one te.extern: a parallel loop over
the matrices, each factorized serially in a float64 copy (a scratch array of n x n; float64
keeps the product of the pivots from losing the digits float32's getrf loses on larger n). A zero
pivot (its column is zero from k down) makes the determinant 0 and is not divided by.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import Buffer, Var, call, cast, const, convert, select
from ..tir.stmt import Allocate, BufferStore, For, IfThenElse, seq
from .registry import OpDef, OpTypeError, register

WIDE = "float64"


def _infer(types: list[TensorType], attrs) -> list[TensorType]:
    (x,) = types
    if not dt.is_float(x.dtype) or x.rank < 2:
        raise OpTypeError(f"det needs a float input of rank 2 or more, got {x.dtype}{list(x.shape)}")
    n, m = x.shape[-2:]
    if n != m:
        raise OpTypeError(f"det needs square matrices, got {n} x {m}")
    return [TensorType(x.shape[:-2], x.dtype)]


def _reference(inputs, attrs):
    (x,) = inputs
    return [np.asarray(np.linalg.det(x.astype(WIDE))).astype(x.dtype)]


def _factorize(x: Buffer, out: Buffer):
    """The loop-IR statement: out[b...] = det(x[b..., :, :]) for every matrix b."""
    batch, n = x.shape[:-2], x.shape[-1]
    b, i, j, k = Var("b"), Var("i"), Var("j"), Var("k")
    index, rest = [], b
    for d in reversed(batch):
        index.append(rest % d)
        rest = rest // d
    index = tuple(index[::-1])
    a = Buffer("lu", (n, n), WIDE, "local")
    det = Buffer("det", (const(1),), WIDE, "local")
    pivot = Buffer("pivot", (const(1),), "int64", "local")
    held = Buffer("held", (const(1),), WIDE, "local")
    p = pivot[0]

    def store(buf, value, *at):
        return BufferStore(buf, cast(buf.dtype, value), tuple(convert(v) for v in at))

    def loop(var, lo, hi, body):
        return For(var, lo, hi - lo, "serial", body)

    zero = const(0.0, WIDE)
    copy = loop(i, const(0), n, loop(j, const(0), n, store(a, x[(*index, i, j)], i, j)))
    find = seq(store(pivot, k, 0), loop(i, k + 1, n, IfThenElse(
        call("fabs", a[i, k]) > call("fabs", a[p, k]), store(pivot, i, 0))))
    swap = IfThenElse(convert(p != k), seq(
        loop(j, const(0), n, seq(store(held, a[k, j], 0), store(a, a[p, j], k, j), store(a, held[0], p, j))),
        store(det, -det[0], 0)))
    eliminate = IfThenElse(convert(a[k, k] != zero), loop(i, k + 1, n, seq(
        store(a, a[i, k] / a[k, k], i, k),
        loop(j, k + 1, n, store(a, a[i, j] - a[i, k] * a[k, j], i, j)))))
    column = seq(find, swap, store(det, det[0] * a[k, k], 0), eliminate)
    matrix = seq(copy, store(det, const(1.0, WIDE), 0), loop(k, const(0), n, column),
                 store(out, select(convert(det[0] == zero), zero, det[0]), *index))  # (-0.0: numpy gives 0.0)
    body = Allocate(a, Allocate(det, Allocate(pivot, Allocate(held, matrix))))
    total = const(1)
    for d in batch:
        total = total * d
    return For(b, const(0), total, "parallel" if batch else "serial", body)


def _compute(inputs, attrs, out_types):
    (x,) = inputs
    return te.extern([(x.shape[:-2], x.dtype)], [x], lambda ins, outs: _factorize(ins[0], outs[0]), name="det")


register(OpDef(
    name="det",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    doc="The determinant of each square matrix (..., n, n) -> (...): LU with partial pivoting, in float64.",
))
