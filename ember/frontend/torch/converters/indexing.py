"""Element-wise indexing, scatters and selection: gather, scatter (of a tensor or a value),
scatter_add, scatter_reduce, topk and sort, onto ember's gather_elements, scatter_elements and
topk. (tril, triu, einsum and repeat reach ember already decomposed by torch.export.)"""

from __future__ import annotations

import numpy as np

from ....tir import dtype as dt
from ..node import Unsupported
from ..registry import handles

REDUCE = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


@handles("gather.default")
def gather(b, x, dim, index, *, sparse_grad=False):
    return b.op("gather_elements", [b.v(x), b.v(index)], axis=dim)


@handles("scatter.src", "scatter.value", "scatter.reduce", "scatter.value_reduce")
def scatter(b, x, dim, index, src, *, reduce=None):
    """A scalar src is written as a tensor of the index's shape; `reduce` is "add" or "multiply"."""
    dtype = b.out.dtype
    index = b.v(index)
    if isinstance(src, bool | int | float):
        shape = b.type_of(index).shape
        if not all(isinstance(d, int) for d in shape):
            raise Unsupported(f"scatter of a value at an index of symbolic shape {shape}")
        src = b.const(np.full(shape, src, dtype=dt.to_numpy(dtype)), "src")
    reduction = {None: "none", "add": "add", "multiply": "mul"}[reduce]
    return b.op("scatter_elements", [b.v(x), index, b.v(src, dtype)], axis=dim, reduction=reduction)


@handles("scatter_add.default")
def scatter_add(b, x, dim, index, src):
    return b.op("scatter_elements", [b.v(x), b.v(index), b.v(src)], axis=dim, reduction="add")


@handles("scatter_reduce.two")
def scatter_reduce(b, x, dim, index, src, reduce, *, include_self=True):
    if reduce not in REDUCE or not include_self:
        raise Unsupported(f"scatter_reduce with reduce={reduce!r}, include_self={include_self}: ember reduces "
                          f"with the element itself, by {', '.join(REDUCE)}")
    return b.op("scatter_elements", [b.v(x), b.v(index), b.v(src)], axis=dim, reduction=REDUCE[reduce])


@handles("topk.default")
def topk(b, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002  (ATen's name)
    return tuple(b.ops("topk", [b.v(x)], k=k, axis=dim, largest=largest))


@handles("sort.default", "sort.stable")
def sort(b, x, dim=-1, descending=False, *, stable=None):
    """A sort is a topk of the whole axis (stable: equal elements keep their order)."""
    y = b.v(x)
    n = b.type_of(y).shape[dim]
    if not isinstance(n, int):
        raise Unsupported(f"sort of an axis of symbolic size {n}")
    return tuple(b.ops("topk", [y], k=n, axis=dim, largest=descending))


@handles("diagonal.default")
def diagonal(b, x, offset=0, dim1=0, dim2=1):
    """The two dims moved last and merged; the diagonal is then every (m+1)-th element from the
    offset's start (as a strided slice), a new last dim."""
    y = b.v(x)
    shape = b.type_of(y).shape
    rank = len(shape)
    d1, d2 = dim1 % rank, dim2 % rank
    n, m = shape[d1], shape[d2]
    length = b.out.shape[-1]
    if not all(isinstance(v, int) for v in (n, m, length)) or length == 0:
        raise Unsupported(f"diagonal of dims of sizes {(n, m)} (static, with a non-empty diagonal)")
    rest = [d for d in range(rank) if d not in (d1, d2)]
    perm = (*rest, d1, d2)
    if perm != tuple(range(rank)):
        y = b.op("transpose", [y], perm=perm)
    y = b.op("reshape", [y], shape=(*(shape[d] for d in rest), n * m))
    start = offset if offset >= 0 else -offset * m
    return b.op("slice", [y], starts=(start,), ends=(start + (length - 1) * (m + 1) + 1,), axes=(-1,),
                steps=(m + 1,))


@handles("index_put.default", "index_put_.default", "_unsafe_index_put.default")
def index_put(b, x, indices, values, accumulate=False):
    """x[i, :, j, ...] = values (accumulate: +=), the write of advanced indexing: the indexed dims
    moved first, the index tensors broadcast to a shape B and stacked on a last axis, one
    scatter_nd of values laid out as (B..., other dims...); values come laid out as reading
    x[indices] gives them (B in place of adjacent indexed dims, else first), and broadcast to it."""
    given = [(d, i) for d, i in enumerate(indices) if i is not None]
    if any(b.type_of(i).dtype == "bool" for _, i in given):
        raise Unsupported("index_put with a boolean mask: ember takes integer index tensors")
    shapes = [b.type_of(i).shape for _, i in given]
    x_shape = b.type_of(x).shape
    if not all(isinstance(n, int) for s in (*shapes, x_shape) for n in s):
        raise Unsupported(f"index_put into {x_shape} at indices of shapes {shapes}: ember takes static shapes")
    dims = [d for d, _ in given]
    rank = len(x_shape)
    kept = [d for d in range(rank) if d not in dims]
    batch = tuple(np.broadcast_shapes(*shapes))
    nb = len(batch)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    lead = dims[0] if adjacent else 0  # where B sits among the read's dims
    read_shape = (*x_shape[:lead], *batch, *(x_shape[d] for d in kept[lead:]))
    vals = b.v(values, b.type_of(x).dtype)
    if tuple(vals.shape) != read_shape:
        vals = b.op("expand", [vals], shape=read_shape)
    if lead:  # B first
        b_first = (*range(lead, lead + nb), *range(lead), *range(lead + nb, len(read_shape)))
        vals = b.op("transpose", [vals], perm=b_first)
    stacked = []
    for _, i in given:
        i = b.v(i, "int64")
        i = i if tuple(i.shape) == batch else b.op("expand", [i], shape=batch)
        stacked.append(b.op("unsqueeze", [i], axes=(nb,)))
    data = b.v(x)
    perm = (*dims, *kept)
    moved = perm != tuple(range(rank))
    if moved:
        data = b.op("transpose", [data], perm=perm)
    where = stacked[0] if len(stacked) == 1 else b.op("concat", stacked, axis=nb)
    y = b.op("scatter_nd", [data, where, vals], reduction="add" if accumulate else "none")
    return b.op("transpose", [y], perm=tuple(int(k) for k in np.argsort(perm))) if moved else y


@handles("bincount.default")
def bincount(b, x, weights=None, minlength=0):
    """ember's host-computed bincount: its length is a symbol of the data (torch's unbacked size)."""
    length = b.out.shape[0]
    if not isinstance(length, str):
        raise Unsupported(f"bincount of static length {length}")
    inputs = [b.v(x)] + ([] if weights is None else [b.v(weights, b.out.dtype)])
    return b.op("bincount", inputs, minlength=minlength, dim=length)


@handles("nonzero.default")
def nonzero(b, x):
    """ember's host-computed nonzero gives (rank, n); torch's is (n, rank)."""
    length = b.out.shape[0]
    if not isinstance(length, str):
        raise Unsupported(f"nonzero of static length {length}")
    return b.op("transpose", [b.op("nonzero", [b.v(x)], dim=length)], perm=(1, 0))
