"""pad(x; pads, mode, value): grow (or, with negative pads in constant mode, crop) every
dimension, ONNX Pad style: pads = (begin_1, ..., begin_n, end_1, ..., end_n).

Modes: "constant" (the new elements are `value`), "reflect" (mirrored without repeating the
edge, so a pad must be smaller than its dimension), "edge" (the edge element repeated), "wrap"
(the dimension repeated periodically, as NumPy's wrap: index (i - begin) mod size).
Pattern `injective`: each output element reads at most one input element.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir.expr import as_int, max_, min_
from .registry import REQUIRED, OpDef, OpTypeError, register

MODES = ("constant", "reflect", "edge", "wrap")


def split_pads(op: str, pads, rank: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(begins, ends) of ONNX-style pads for `rank` dimensions."""
    pads = tuple(pads)
    if len(pads) != 2 * rank or not all(isinstance(p, int) for p in pads):
        raise OpTypeError(f"{op}: pads {pads} must be {2 * rank} integers (begin_1..begin_{rank}, "
                          f"end_1..end_{rank})")
    return pads[:rank], pads[rank:]


def _infer(types, attrs):
    (x,) = types
    mode = attrs["mode"]
    if mode not in MODES:
        raise OpTypeError(f"pad: mode {mode!r} is not one of {MODES}")
    begins, ends = split_pads("pad", attrs["pads"], x.rank)
    shape = []
    for k, (d, b, e) in enumerate(zip(x.shape, begins, ends)):
        if b == 0 and e == 0:
            shape.append(d)
            continue
        if isinstance(d, str):
            raise OpTypeError(f"pad: dimension {k} is the symbol {d!r}; only known sizes are padded")
        if mode != "constant" and min(b, e) < 0:
            raise OpTypeError(f"pad: negative pads {(b, e)} on dimension {k} need mode 'constant'")
        if mode == "reflect" and max(b, e) >= d:
            raise OpTypeError(f"pad: reflect pads {(b, e)} on dimension {k} must be smaller than its size {d}")
        if mode in ("edge", "wrap") and d == 0:
            raise OpTypeError(f"pad: {mode} padding of the empty dimension {k}")
        if d + b + e < 0:
            raise OpTypeError(f"pad: pads {(b, e)} crop more than dimension {k} of size {d}")
        shape.append(d + b + e)
    return [TensorType(tuple(shape), x.dtype)]


def _reference(inputs, attrs):
    (x,) = inputs
    begins, ends = split_pads("pad", attrs["pads"], x.ndim)
    width = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    if attrs["mode"] == "constant":
        out = np.pad(x, width, mode="constant", constant_values=np.asarray(attrs["value"]).astype(x.dtype))
    else:
        out = np.pad(x, width, mode=attrs["mode"])
    crop = tuple(slice(-min(b, 0), out.shape[k] + min(e, 0)) for k, (b, e) in enumerate(zip(begins, ends)))
    return [out[crop].copy()]


def _source_index(i, n, begin: int, mode: str):
    """The input index that output index i reads along a dimension of size n."""
    j = i - begin
    if mode == "edge":
        return min_(max_(j, 0), n - 1)
    if mode == "wrap":  # te's % is a floor modulo: never negative
        return j % n
    if mode == "reflect":
        j = te.if_then_else(j < 0, 0 - j, j)
        return te.if_then_else(j >= n, 2 * (n - 1) - j, j)
    return j


def _compute(inputs, attrs, out_types):
    (x,) = inputs
    mode = attrs["mode"]
    begins, ends = split_pads("pad", attrs["pads"], x.ndim)
    shape = [d if b == e == 0 else as_int(d) + b + e for d, b, e in zip(x.shape, begins, ends)]

    def element(*i):
        idx = tuple(i[k] if b == e == 0 else _source_index(i[k], x.shape[k], b, mode)
                    for k, (b, e) in enumerate(zip(begins, ends)))
        if mode != "constant":
            return x[idx]
        inside = [te.all(j >= 0, j < x.shape[k]) for k, (j, b, e) in enumerate(zip(idx, begins, ends))
                  if max(b, e) > 0]
        return te.if_then_else(te.all(*inside), x[idx], te.const(attrs["value"], x.dtype)) if inside else x[idx]

    return [te.compute(shape, element, name="pad")]


register(OpDef(
    name="pad",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="injective",
    attrs={"pads": REQUIRED, "mode": "constant", "value": 0.0},
    doc="Pad (or crop) every dimension: constant, reflect, edge or wrap.",
))
