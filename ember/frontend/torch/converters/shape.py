"""Shape and data movement: views and reshapes, permutations, expand, concatenation, splits,
slices, selects, squeezes, indexing, padding, and tensor creation that depends on run-time
shapes (creation from constants is folded by the importer before any handler sees it).

Reshape-like operators take their result shape from torch's metadata (`b.out`), which has -1
resolved and symbolic sizes named.
"""

from __future__ import annotations

import torch

from ..node import Const, Unsupported, torch_dtype
from ..registry import handles

INT64_MAX = 2**63 - 1


@handles("view.default")
def view(b, x, size):
    y = b.v(x)
    return y if tuple(b.type_of(y).shape) == tuple(b.out.shape) else b.op("reshape", [y], shape=b.out.shape)


@handles("permute.default")
def permute(b, x, dims):
    rank = len(dims)
    perm = tuple(d % rank for d in dims)
    return b.v(x) if perm == tuple(range(rank)) else b.op("transpose", [b.v(x)], perm=perm)


@handles("expand.default")
def expand(b, x, size, *, implicit=False):
    return b.op("expand", [b.v(x)], shape=b.out.shape)


@handles("repeat.default")
def repeat(b, x, repeats):
    """x tiled: each dimension of size n is reshaped to (1, n), expanded to (r, n), then reshaped to r * n."""
    y = b.v(x)
    shape = (1,) * (len(repeats) - b.type_of(y).rank) + tuple(b.type_of(y).shape)
    y = b.op("reshape", [y], shape=sum(((1, n) for n in shape), ()))
    y = b.op("expand", [y], shape=sum(((r, n) for r, n in zip(repeats, shape)), ()))
    return b.op("reshape", [y], shape=b.out.shape)


@handles("cat.default")
def cat(b, tensors, dim=0):
    """Empty 1-d tensors are skipped, as torch does (an empty cache before the first step)."""
    dtype, rank = b.out.dtype, b.out.rank
    kept = [x for x in tensors if not (rank > 1 and b.type_of(x).shape == (0,))]
    if len(kept) == 1:
        return b.v(kept[0], dtype)
    return b.op("concat", [b.v(x, dtype) for x in kept], axis=dim % rank)


@handles("arange.default", "arange.start", "arange.start_step")
def arange(b, *args, **kwargs):
    """start, start + step, ... of the node's length (torch's metadata), which may be symbolic;
    a symbolic start is a size used as a value, added to arange(0, ...)."""
    numbers = [a for a in args if not isinstance(a, torch.dtype)]
    start, step = (numbers[0] if len(numbers) > 1 else 0), (numbers[2] if len(numbers) > 2 else 1)
    out = b.out
    if isinstance(step, str):
        raise Unsupported(f"a symbolic step {step!r}")
    if not isinstance(start, str):
        return b.op("arange", [], length=out.shape[0], start=start, step=step, dtype=out.dtype)
    ramp = b.op("arange", [], length=out.shape[0], start=0, step=step, dtype=out.dtype)
    return b.op("add", [ramp, b.operand(start, out.dtype)])


@handles("split_with_sizes.default")
def split_with_sizes(b, x, split_sizes, dim=0):
    return tuple(b.ops("split", [b.v(x)], axis=dim, sizes=tuple(split_sizes)))


@handles("split.Tensor", "chunk.default")
def split(b, x, size_or_chunks, dim=0):
    """Pieces of one size, the last one shorter where it does not divide the dimension (chunk: as
    many as torch's metadata has, which may be fewer than asked for)."""
    dim %= b.type_of(x).rank
    sizes = tuple(t.shape[dim] for t in b.out_types)
    if not all(isinstance(s, int) for s in sizes):
        raise Unsupported(f"a split of a symbolic dimension into {sizes}")
    return split_with_sizes(b, x, sizes, dim)


@handles("slice.Tensor")
def slice_(b, x, dim=0, start=None, end=None, step=1):
    t = b.type_of(x)
    start, end = start or 0, INT64_MAX if end is None else end
    n = t.shape[dim]
    if start == 0 and step == 1 and (end == INT64_MAX or (isinstance(n, int) and isinstance(end, int) and end >= n)):
        return x  # the whole dimension
    return b.op("slice", [b.v(x)], starts=(start,), ends=(end,), axes=(dim,), steps=(step,))


@handles("select.int")
def select(b, x, dim, index):
    end = index + 1 if index != -1 else INT64_MAX
    y = b.op("slice", [b.v(x)], starts=(index,), ends=(end,), axes=(dim,))
    return b.op("squeeze", [y], axes=(dim,))


@handles("squeeze.dims")
def squeeze(b, x, dim):
    shape = b.type_of(x).shape
    axes = tuple(sorted({d % len(shape) for d in dim if shape[d] == 1})) if shape else ()
    return b.op("squeeze", [b.v(x)], axes=axes) if axes else x


@handles("squeeze.dim")
def squeeze_dim(b, x, dim):
    return squeeze(b, x, [dim])


@handles("squeeze.default")
def squeeze_all(b, x):
    return squeeze(b, x, range(b.type_of(x).rank))


@handles("unsqueeze.default")
def unsqueeze(b, x, dim):
    return b.op("unsqueeze", [b.v(x)], axes=(dim % b.out.rank,))


@handles("index.Tensor")
def index(b, x, indices):
    """x[i, :, j, ...]: advanced indexing, static or symbolic sizes (None: a whole dimension).
    One index tensor is numpy.take on its dimension. Several broadcast together to a shape B and
    pick elements of their dimensions: those dimensions moved first (a transpose), the indices
    broadcast and stacked on a last axis (B..., k), one gather_nd gives (B..., other dims...).
    As in torch and NumPy, B then stays first unless the index tensors are on adjacent
    dimensions, where it takes their place (a transpose back). Negative indices wrap."""
    given = [(d, i) for d, i in enumerate(indices) if i is not None]
    if any(b.type_of(i).dtype == "bool" for _, i in given):
        raise Unsupported("indexing with a boolean mask (its result's shape depends on the data)")
    dims = [d for d, _ in given]
    if len(given) == 1:
        return b.op("gather", [b.v(x), b.v(given[0][1])], axis=dims[0])
    rank, out = b.type_of(x).rank, b.out
    kept = [d for d in range(rank) if d not in dims]
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    lead = dims[0] if adjacent else 0  # the result's dimensions before B
    nb = out.rank - len(kept)
    shape = out.shape[lead:lead + nb]  # B, as torch broadcast it
    stacked = []
    for _, i in given:
        i = b.v(i, "int64")
        i = i if i.shape == shape else b.op("expand", [i], shape=shape)
        stacked.append(b.op("unsqueeze", [i], axes=(nb,)))
    data = b.v(x)
    if dims + kept != list(range(rank)):
        data = b.op("transpose", [data], perm=(*dims, *kept))
    y = b.op("gather_nd", [data, b.op("concat", stacked, axis=nb)])
    if lead:
        y = b.op("transpose", [y], perm=(*range(nb, nb + lead), *range(nb), *range(nb + lead, out.rank)))
    return y


@handles("index_select.default")
def index_select(b, x, dim, index):
    return b.op("gather", [b.v(x), b.v(index)], axis=dim)


@handles("constant_pad_nd.default")
def constant_pad_nd(b, x, pad, value=0):
    """ATen pads the last dims first, in (begin, end) pairs; ember takes (begins..., ends...)."""
    rank = b.type_of(x).rank
    begins, ends = [0] * rank, [0] * rank
    for k in range(len(pad) // 2):
        begins[rank - 1 - k], ends[rank - 1 - k] = pad[2 * k], pad[2 * k + 1]
    if min(begins + ends) < 0:
        raise Unsupported(f"negative padding {tuple(pad)} (cropping)")
    return b.op("pad", [b.v(x)], pads=tuple(begins + ends), mode="constant", value=float(value))


def _fill(b, value):
    """A tensor of the node's result type full of value (a number, or a symbolic size: torch's
    SymInt): a constant when its shape is static and its value a number."""
    out = b.out
    if out.is_static and not isinstance(value, str):
        return Const(torch.full(out.shape, value, dtype=torch_dtype(out.dtype)), b.node.name)
    return b.op("expand", [b.operand(value, out.dtype)], shape=out.shape)


@handles("full_like.default")
def full_like(b, x, fill_value, **_):
    return _fill(b, fill_value)


@handles("full.default")
def full(b, size, fill_value, **_):
    return _fill(b, fill_value)


@handles("new_full.default")
def new_full(b, x, size, fill_value, **_):
    return _fill(b, fill_value)


# an empty tensor's values are whatever memory held: zeros are as good as any
@handles("zeros.default", "new_zeros.default", "zeros_like.default", "empty.memory_format", "new_empty.default",
         "empty_like.default")
def zeros(b, *_, **__):
    return _fill(b, 0)


@handles("ones.default", "new_ones.default", "ones_like.default")
def ones(b, *_, **__):
    return _fill(b, 1)
