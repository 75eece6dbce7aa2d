"""Row schedules: kernels whose output is computed row by row from statistics of the row
(softmax, the norms, reductions, where each output element is a row of its own).

An output says how it splits into rows with the compute attribute `ember.ops.hints.by_rows(row_axes,
inner_axes)`; `schedule_rows` then
- reorders the output's loops to (row axes..., inner axes...), fuses the row loops and runs
  them in parallel;
- computes every other stage (the row's max, sum, mean, ...) inside the row loop, so a row's
  statistics live in a few scalars, not in tensors of their own;
- runs reductions over contiguous elements (computes marked CONTIGUOUS) in vector lanes: the
  innermost reduction loops split by the lanes and factored out (rfactor) into one vector of
  partial results, reduced at the end (C compilers keep float reductions in order, so they
  would not vectorize them); that vector is itself the fold of ACCUMULATORS independent ones,
  which consecutive vectors of the row go to in turn, so that the adds of one do not wait for
  those of another; and its lanes are reduced in halves, as vectors of 8, 4 and 2 (the order of
  a sum changes with it, within rounding; max and min, which propagate NaN from either side, do
  not change);
- vectorizes the inner loops of the output (and of stages of its shape) when they are its
  trailing axes and vector lanes divide their static extent (a guarded vector loop would run
  scalar).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np

from ...errors import ScheduleError
from ...ops.hints import CONTIGUOUS, lanes_dividing
from ...te.tensor import ComputeOp, input_tensors_of
from ...tir import dtype as dt
from ...tir.expr import as_int


def schedule_rows(s, outs, target) -> None:
    """The row schedule (see the module's docstring) of an output computed with
    `by_rows(row_axes, inner_axes)`; without, every output element is a row."""
    (out,) = outs
    lanes = target.lanes()
    row_axes, inner_axes = out.op.attrs.get("rows", (tuple(range(out.ndim)), ()))
    out_lanes = factor_lanes(s, out, lanes)  # first: rfactor rebuilds out's loops
    out_folds = fold_lanes(s, out) if out_lanes is not None else []
    st = s[out]
    axes = list(st.op.axis)
    if [*row_axes, *inner_axes] != sorted([*row_axes, *inner_axes]):
        st.reorder(*[axes[a] for a in (*row_axes, *inner_axes)])
    if row_axes:
        row = parallel_rows(s, out, [axes[a] for a in row_axes], lanes)
        if out_lanes is not None:
            for t in [*reversed(out_folds), out_lanes]:  # consumers first
                s[t].compute_at(st, row)
    else:  # one row: every stage at the root
        for t in stages_of(s, out):
            vectorize_reduction(s, t, lanes)
    if out_lanes is not None:
        vectorize_lanes(s, out_lanes)
        for t in out_folds:
            lanes_innermost(s[t])
    if inner_axes and list(inner_axes) == list(range(len(axes) - len(inner_axes), len(axes))):
        # out, and the stages of out's shape computed for a row with it (softmax's exp)
        for t in [*stages_of(s, out), out]:
            if t.ndim == out.ndim and not t.op.reduce_axis:
                vectorize_inner(s[t], [s[t].op.axis[a] for a in inner_axes], lanes)


def stages_of(s, t) -> list:
    """The computed tensors t reads, directly or not, consumers before their producers; not those
    inlined (a fused kernel's prologue, the adds before a layer norm)."""
    return [op.output(0) for op in reversed(input_tensors_of([t]))
            if isinstance(op, ComputeOp) and op is not t.op and s.computed(op.output(0))]


def parallel_rows(s, out, row_loops: Sequence, lanes: int):
    """Fuse out's (adjacent, outermost) row loops and run them in parallel, every stage out reads
    computed inside, with its reductions vectorized (`lanes`: fp32 lanes of a register). Returns
    the row loop."""
    st = s[out]
    row = st.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0]
    st.parallel(row)
    for t in stages_of(s, out):
        s[t].compute_at(st, row)
        vectorize_reduction(s, t, lanes)
    return row


def vectorize_reduction(s, t, lanes: int) -> None:
    """t's reduction in vector lanes where it is (`factor_lanes`, `vectorize_lanes`)."""
    partial = factor_lanes(s, t, lanes)
    if partial is not None:
        vectorize_lanes(s, partial)
        for fold in fold_lanes(s, t):
            lanes_innermost(s[fold])


def lanes_for(extent: int | None, lanes: int) -> int | None:
    """Vector lanes (a register's `lanes`, else half) that divide a static extent (a guarded
    vector loop would run scalar)."""
    return lanes_dividing(extent, (lanes, lanes // 2))


def tail_lanes(extent: int | None, lanes: int) -> int | None:
    """A register's `lanes` for a static extent they do not divide but span several times: the
    last vector is guarded, and the vectorizer runs the others unguarded (a guard that passes an
    interval of lanes: ember.tir.transform.vectorize)."""
    return lanes if lanes > 1 and extent is not None and extent >= TAIL_VECTORS * lanes else None


def vectorize_inner(st, inner: Sequence, lanes: int) -> None:
    """Fuse the innermost axes `inner` (te axes of the stage, adjacent, in order) and vectorize
    the fused loop when vector lanes divide its static extent."""
    extents = [as_int(a.dom.extent) for a in inner]
    extent = None if None in extents else int(np.prod(extents))
    lanes = lanes_for(extent, lanes) or tail_lanes(extent, lanes)
    if lanes is None:
        return
    loop = st.fuse(*inner) if len(inner) > 1 else inner[0]
    _, vec = st.split(loop, factor=lanes)
    with contextlib.suppress(ScheduleError):  # a body the vectorizer cannot take stays scalar
        st.vectorize(vec)


def factor_lanes(s, t, lanes: int):
    """A float reduction over contiguous elements (CONTIGUOUS) split into partial results per
    vector lane (rfactor), reduced after them: the fewest innermost reduction loops whose static
    extents multiply to a multiple of the lanes are fused and split by them. Returns the
    partial results' tensor for `vectorize_lanes`, once it is placed (None when t does not
    qualify)."""
    st = s[t]
    if not t.op.attrs.get(CONTIGUOUS) or not dt.is_float(t.dtype):
        return None
    ks = st.op.reduce_axis
    extent = 1
    for n in range(1, len(ks) + 1):
        e = as_int(ks[-n].dom.extent)
        if e is None:
            return None
        extent *= e
        width = lanes_for(extent, lanes)
        if width is not None:
            break
    else:  # no lanes divide: the last vector of the row guarded (tail_lanes)
        n, width = 1, tail_lanes(as_int(ks[-1].dom.extent), lanes)
        if width is None:
            return None
    inner = ks[-n:]
    _, lane = st.split(st.fuse(*inner) if len(inner) > 1 else inner[0], factor=width)
    return s.rfactor(t, lane, factor_axis=t.ndim)


TAIL_VECTORS = 4  # vectors a row spans at least for its guarded last one to pay (tail_lanes)
ACCUMULATORS = 4  # independent vector accumulators per reduction (`vectorize_lanes`)


def vectorize_lanes(s, partial) -> None:
    """The partial results of `factor_lanes` computed as one vector, lanes innermost, from
    ACCUMULATORS vectors (or 2) where they divide the vectors of a row: a single accumulator
    makes every vector add wait for the one before (a 768-element row: 48 dependent adds, four
    cycles each); several independent ones run in parallel and are folded into one at the end
    (an rfactor of the partial results over the accumulator index)."""
    st = s[partial]
    ko = st.op.reduce_axis[-1]  # the vectors of a row (the outer part of the lane split)
    extent = as_int(ko.dom.extent)
    count = next((n for n in (ACCUMULATORS, 2) if extent is not None and extent % n == 0 and extent > n), None)
    if count is not None:
        _, a = st.split(ko, factor=count)
        accumulators = s.rfactor(partial, a, factor_axis=partial.ndim - 1)
        acc = s[accumulators]
        lane, a = acc.op.axis[-2], acc.op.axis[-1]
        acc.reorder(*acc.op.reduce_axis, a, lane)
        acc.unroll(a)
        acc.vectorize(lane)
        st = s[partial]  # now the fold of the accumulators into one vector
    lanes_innermost(st)


def lanes_innermost(st) -> None:
    """A stage of partial results over vector lanes (its last axis) computed as one vector."""
    st.reorder(*st.op.reduce_axis, st.op.axis[-1])
    st.vectorize(st.op.axis[-1])


def fold_lanes(s, t) -> list:
    """t's sum (or max, ...) of the lanes of its partial results (after `factor_lanes`) as a tree:
    the upper half of the lanes added to the lower half as a vector (an rfactor over the half),
    down to two, rather than a chain of one scalar add per lane (16 dependent adds of four cycles
    for float32: a third of a 768-element row's reduction). Returns the stages of the halves, the
    largest first, for `lanes_innermost` once they are placed."""
    folds = []
    while True:
        (k,) = s[t].op.reduce_axis
        extent = as_int(k.dom.extent)
        if extent is None or extent <= 2 or extent % 2:
            return folds
        _, half = s[t].split(k, factor=extent // 2)
        folds.append(s.rfactor(t, half, factor_axis=t.ndim))


