"""Sizes as values: `size` (a dimension's value, a 0-d int64 tensor) and `arange` (0, 1, ... as a
1-d tensor whose length may be symbolic).

A decode step computes with its sizes: the position of the new token is the cache's length
(`torch.arange(past, past + 1)`), the causal mask compares positions up to `past + 1`. When the
sizes are symbols (ember.dims), these values exist only at run time, and a kernel knows a
symbol only as a size argument, bound from the shape of one of its buffers. So `size` takes as
inputs the tensors whose dimensions carry the symbols (`bind`: for each symbol, the input and the
axis where it is that dimension): it reads none of their elements, only their shapes, and its
value is the dimension expression (`dim`) over them. `arange` needs no input: its output's length
carries its symbols.
"""

from __future__ import annotations

import numpy as np

from .. import dims, te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import cast, convert
from .common import te_dim, te_shape
from .registry import REQUIRED, OpDef, OpTypeError, register


def _infer_size(types, attrs):
    dim, bind = attrs["dim"], attrs["bind"]
    bound = {s for s, _, _ in bind}
    missing = [s for s in dims.symbols_of(dim) if s not in bound]
    if missing:
        raise OpTypeError(f"size: dimension {dim!r} needs symbol(s) {missing} that `bind` does not bind")
    for s, k, axis in bind:
        if not (0 <= k < len(types)) or not (0 <= axis < types[k].rank) or types[k].shape[axis] != s:
            raise OpTypeError(f"size: symbol {s!r} is bound to input {k} axis {axis}, which is not that dimension")
    return [TensorType((), "int64")]


def _reference_size(inputs, attrs):
    values = {s: inputs[k].shape[axis] for s, k, axis in attrs["bind"]}
    return [np.array(dims.evaluate(attrs["dim"], values), dtype=np.int64)]


def _compute_size(inputs, attrs, out_types):
    known = {s: inputs[k].shape[axis] for s, k, axis in attrs["bind"]}
    value = cast("int64", te_dim(attrs["dim"], dict(known)))
    return [te.compute((), lambda: value, name="size")]


def _infer_arange(types, attrs):
    if not dt.is_float(attrs["dtype"]) and not dt.is_int(attrs["dtype"]):
        raise OpTypeError(f"arange: dtype {attrs['dtype']!r} is not a number type")
    return [TensorType((attrs["length"],), attrs["dtype"])]


def _reference_arange(inputs, attrs):
    n = attrs["length"]
    if isinstance(n, str):
        raise OpTypeError(f"arange: the reference needs a known length, got {n!r}")
    return [(attrs["start"] + attrs["step"] * np.arange(n)).astype(attrs["dtype"])]


def _compute_arange(inputs, attrs, out_types):
    dtype, start, step = attrs["dtype"], attrs["start"], attrs["step"]
    return [te.compute(te_shape(out_types[0]), lambda i: convert(start, dtype) + cast(dtype, i) * convert(step, dtype),
                       name="arange")]


register(OpDef("size", _infer_size, _reference_size, _compute_size, "injective",
               {"dim": REQUIRED, "bind": REQUIRED}, num_inputs=(1, None),
               doc="The value of a dimension expression of symbols, bound from the inputs' shapes (0-d int64)."))
register(OpDef("arange", _infer_arange, _reference_arange, _compute_arange, "injective",
               {"length": REQUIRED, "start": 0, "step": 1, "dtype": "int64"}, num_inputs=(0, 0),
               doc="start, start + step, ... (`length` elements; the length may be symbolic)."))
