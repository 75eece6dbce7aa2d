"""as_strided: a view given by sizes and strides over the memory of its input.

ember's tensors have no strides: a value is its elements in row-major order. torch's memory of
the input is known from its metadata (its strides and storage offset as torch laid it out, e.g.
the channels-last result of a mean over a permuted tensor, which AdaptiveAvgPool2d restrides
with as_strided). Where that memory is dense (every element once, no gaps: a permutation of a
contiguous tensor), it is the input transposed into the order of its strides and flattened, and
the view reads it at `offset + sum(i * stride)`: a reshape (and a transpose) when the view is
itself a dense permutation of that memory, else a gather of those positions. Overlapping or
gapped memory, positions outside it, and symbolic sizes are refused.
"""

from __future__ import annotations

import numpy as np

from ..node import Unsupported
from ..registry import handles


def _storage_order(shape, strides) -> tuple[int, ...] | None:
    """The dims from the largest stride to the smallest when they lay `shape` out densely, else None."""
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
    step = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != step:
            return None
        step *= shape[d]
    return tuple(order)


def _positions(size, stride, offset: int) -> np.ndarray:
    pos = np.full(tuple(size), offset, np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        pos += (np.arange(n, dtype=np.int64) * s).reshape([n if k == d else 1 for k in range(len(size))])
    return pos


@handles("as_strided.default", "as_strided_copy.default")
def as_strided(b, x, size, stride, storage_offset=None):
    val = b.node.args[0].meta["val"]
    size, stride = tuple(size), tuple(stride)
    if not all(isinstance(n, int) for n in (*val.shape, *val.stride(), *size, *stride)):
        raise Unsupported(f"as_strided of a tensor of symbolic shape {tuple(val.shape)} or with symbolic sizes {size}")
    shape, numel = tuple(val.shape), val.numel()
    order = _storage_order(shape, val.stride())
    if order is None:
        raise Unsupported(f"as_strided over a tensor whose memory is not dense (shape {shape}, strides "
                          f"{tuple(val.stride())})")
    offset = val.storage_offset() if storage_offset is None else storage_offset
    pos = _positions(size, stride, offset - val.storage_offset())
    if pos.size and (pos.min() < 0 or pos.max() >= numel):
        raise Unsupported(f"as_strided with sizes {size}, strides {stride} reads outside its input's {numel} elements")
    y = b.v(x)
    if order != tuple(range(len(shape))):
        y = b.op("transpose", [y], perm=order)
    flat = b.op("reshape", [y], shape=(numel,))
    view = _storage_order(size, stride)  # a dense permutation of the memory: reshape, transpose back
    if view is not None and pos.size == numel and pos.size and pos.min() == 0:
        z = b.op("reshape", [flat], shape=tuple(size[d] for d in view))
        inverse = tuple(int(k) for k in np.argsort(view))
        return z if inverse == tuple(range(len(size))) else b.op("transpose", [z], perm=inverse)
    return b.op("gather", [flat, b.const(pos, "as_strided_positions")], axis=0)
