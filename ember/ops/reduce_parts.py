"""reduce_parts: a whole tensor's reduction cut into parts, the first of a GPU's two kernels for a
reduction to one value over many elements (ember.passes.split_reduce writes it):

    reduce_parts(x; kind, parts)[p] = kind over i in [p * c, min((p + 1) * c, n)) of x[i]

x one-dimensional of n elements (static or symbolic), c = ceil(n / parts), kind "sum", "prod",
"max" or "min"; the partials are in x's accumulation dtype (float32 for half inputs, float64 for
float64: float32 partials would keep 7 of its 16 digits), a part past the end its
kind's identity. Each part is a block of the GPU (ember.schedules.gpu.reduce), reading a
contiguous range; the reduction of the partials, in the order of the parts, is another kernel,
so that the same input gives the same bits (no atomics).
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import const
from .reduction import acc_dtype
from .registry import REQUIRED, OpDef, OpTypeError, register

KINDS = {"sum": (te.sum, 0.0), "prod": (te.prod, 1.0), "max": (te.max, -np.inf), "min": (te.min, np.inf)}  # reducer,
# identity


def _infer(types, attrs):
    (x,) = types
    if x.rank != 1 or not dt.is_float(x.dtype):
        raise OpTypeError(f"reduce_parts: a one-dimensional float tensor, got {x}")
    if attrs["kind"] not in KINDS:
        raise OpTypeError(f"reduce_parts: kind must be one of {sorted(KINDS)}, got {attrs['kind']!r}")
    if not isinstance(attrs["parts"], int) or attrs["parts"] < 1:
        raise OpTypeError(f"reduce_parts: parts must be a positive int, got {attrs['parts']!r}")
    return [TensorType((attrs["parts"],), acc_dtype(x.dtype))]


def _reference(inputs, attrs):
    (x,) = inputs
    n, parts = x.shape[0], attrs["parts"]
    c = -(-n // parts)
    reduce = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[attrs["kind"]]
    identity = KINDS[attrs["kind"]][1]
    out = acc_dtype(x.dtype.name)
    x = x.astype(np.float64 if attrs["kind"] in ("sum", "prod") else out)
    return [np.array([reduce(x[p * c:(p + 1) * c]) if p * c < n else identity for p in range(parts)], out)]


def _compute(inputs, attrs, out_types):
    (x,) = inputs
    reducer, identity = KINDS[attrs["kind"]]
    n, parts, out = x.shape[0], attrs["parts"], out_types[0].dtype
    c = (n + (parts - 1)) // parts
    k = te.reduce_axis((0, c), name="k")

    def part(p):
        i = p * c + k
        return reducer(te.if_then_else(i < n, x[i].astype(out), const(identity, out)), axis=k)

    return [te.compute((parts,), part, name="partials")]


register(OpDef(
    name="reduce_parts",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="reduction",
    attrs={"kind": REQUIRED, "parts": REQUIRED},
    num_inputs=(1, 1),
    doc="A one-dimensional tensor's sum, prod, max or min in `parts` contiguous parts (partials in its accumulation "
        "dtype): the first kernel of a GPU's reduction to one value.",
))
