"""tensor_scatter (ember.ops.tensor_scatter: a decoder's key/value cache update) on the GPU as a
choice per output element, which the default spreads over the GPU's threads: the update's entry
where the element's position along the axis falls in the rows written from its batch entry's
write index, else the cache's. The CPU's kernel copies the cache, then stores the update's rows
over it, two loops that the GPU's blocks would run in any order. Each element still reads the
cache only at its own place, so the memory plan may write the output over the cache. Linear, no
element has a row outside the cache to report, so each checks its batch entry's window
(ember.ops.tensor_scatter.linear_start): one outside the cache raises IndexOutOfRangeError."""

from __future__ import annotations

from ... import te
from ...ops.common import te_shape
from ...ops.tensor_scatter import _axis, linear_start
from ...tir import dtype as dt
from ...tir.expr import binary, cast, const, select
from . import computes


@computes("tensor_scatter")
def scatter_as_choice(inputs, attrs, out_types):
    cache, update = inputs[:2]
    starts = inputs[2] if len(inputs) == 3 else None
    axis = _axis(attrs, cache.ndim)
    length, count = cache.shape[axis], update.shape[axis]

    def element(*i):
        p = i[axis]
        start = const(0, dt.INDEX_DTYPE) if starts is None else cast(dt.INDEX_DTYPE, starts[i[0]])
        if attrs["mode"] == "circular":  # the last row that wraps to p (an update longer than the cache: symbolic)
            row = ((p - start) % length + length) % length
            row = row + (count - 1 - row) // length * length  # (past the update's end: below 0, the cache's)
        else:  # the window checked (no element has a row to report an index out of range), wrapped once
            row = p - linear_start(start, count, length)
            row = select(row < 0, row + length, row)
        inside = te.all(row >= 0, row < count)
        at = binary("min", binary("max", row, 0), count - 1)  # (read in the update's bounds either way)
        return te.if_then_else(inside, update[(*i[:axis], at, *i[axis + 1:])], cache[i])

    return [te.compute(te_shape(out_types[0], inputs), element, name="tensor_scatter")]
