"""dynamic_slice(x, starts; axes, sizes): windows of static sizes at starts read at run time (an
ONNX Slice inside a loop body whose starts come from the iteration number, ends = starts + size).

starts is an integer tensor of one element per axis (a scalar for one axis). A negative start
counts from the end, as Slice's does; the start is then clamped so that the window fits in the
axis (as XLA's DynamicSlice): where Slice would give fewer elements, past an end, the output
keeps its static size and shows the last `size` elements. Each output element is one input
element found by index arithmetic: pattern `injective`, like slice; the starts are read per
element from their buffer (a few scalars, in cache).
"""

from __future__ import annotations

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import cast
from .common import normalize_axis
from .registry import REQUIRED, OpDef, OpTypeError, register


def _checked(types: list[TensorType], attrs) -> tuple[list[int], list[int]]:
    x, starts = types
    axes = [normalize_axis("dynamic_slice", a, x.rank) for a in attrs["axes"]]
    sizes = list(attrs["sizes"])
    if len(set(axes)) != len(axes) or len(sizes) != len(axes) or not axes:
        raise OpTypeError(f"dynamic_slice: axes {attrs['axes']} and sizes {attrs['sizes']} must be distinct axes, one "
                          "size each")
    if not dt.is_int(starts.dtype) or starts.numel != len(axes) or starts.rank > 1:
        raise OpTypeError(f"dynamic_slice: starts must be {len(axes)} integer(s), one per axis, got {starts}")
    for a, n in zip(axes, sizes):
        d = x.shape[a]
        if not isinstance(d, int):  # (a window that may not fit: the kernel would read past the axis)
            raise OpTypeError(f"dynamic_slice: axis {a} is the symbolic dimension {d!r}; it must be a known size")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0 or n > d:
            raise OpTypeError(f"dynamic_slice: the size along axis {a} must be an int from 0 to {d}, got {n!r}")
    return axes, sizes


def _infer(types: list[TensorType], attrs) -> list[TensorType]:
    axes, sizes = _checked(types, attrs)
    shape = list(types[0].shape)
    for a, n in zip(axes, sizes):
        shape[a] = n
    return [TensorType(tuple(shape), types[0].dtype)]


def _reference(inputs, attrs):
    x, starts = inputs
    index = [slice(None)] * x.ndim
    for k, (a, n) in enumerate(zip(attrs["axes"], attrs["sizes"])):
        a %= x.ndim
        s = int(starts.reshape(-1)[k])
        s = s + x.shape[a] if s < 0 else s
        s = min(max(s, 0), x.shape[a] - n)
        index[a] = slice(s, s + n)
    return [x[tuple(index)]]


def _compute(inputs, attrs, out_types):
    x, starts = inputs
    axes = [normalize_axis("dynamic_slice", a, x.ndim) for a in attrs["axes"]]
    shape = list(x.shape)
    for a, n in zip(axes, attrs["sizes"]):
        shape[a] = n

    def start(k: int, a: int):
        s = cast("int64", starts[(k,) if len(starts.shape) else ()])
        s = te.if_then_else(s < 0, s + x.shape[a], s)
        return te.max(te.min(s, x.shape[a] - attrs["sizes"][k]), 0)

    def element(*i):
        at = list(i)
        for k, a in enumerate(axes):
            at[a] = start(k, a) + i[a]
        return x[tuple(at)]

    return [te.compute(tuple(shape), element, name="dynamic_slice")]


register(OpDef(
    name="dynamic_slice",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="injective",
    attrs={"axes": REQUIRED, "sizes": REQUIRED},
    num_inputs=(2, 2),
    doc="Windows of static sizes along axes at starts given at run time (negative: from the end), clamped to fit.",
))
