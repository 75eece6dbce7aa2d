"""Binary elementwise arithmetic with NumPy broadcasting: add, sub, mul, div, pow, maximum,
minimum, floor_divide, mod (floor: the sign of the divisor), trunc_divide and fmod (toward zero:
the sign of the dividend, C's `/` and `%`).

Integer division by zero is defined, never an error (NumPy's results): x // 0 == x % 0 == 0 in
every convention, and MIN // -1 == MIN (it wraps), MIN % -1 == 0. A model compiled with
`checked=True` raises ZeroDivisionError instead (ember.codegen.c).

This module is also the template of an operator family: a table of (name, NumPy function,
te expression) and one `register(OpDef(...))` per row.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir.expr import as_int
from ..tir.power import power
from .common import broadcast_index, broadcast_shapes, result_dtype
from .registry import OpDef, register


def _infer(name):
    def infer(types: list[TensorType], attrs) -> list[TensorType]:
        return [TensorType(broadcast_shapes(name, types[0].shape, types[1].shape), result_dtype(name, *types))]

    return infer


def _compute(fn):
    def compute(inputs, attrs, out_types):
        a, b = inputs
        (out,) = out_types
        return [te.compute(
            out_type_shape(a, b),
            lambda *i: fn(a[broadcast_index(i, a.shape)], b[broadcast_index(i, b.shape)]),
            name="out",
        )]

    return compute


def out_type_shape(*tensors):
    """The broadcast te shape of te tensors (symbolic dims compared by identity)."""
    rank = max(t.ndim for t in tensors)
    out = []
    for d in range(rank):
        dims = [t.shape[d - rank + t.ndim] for t in tensors if d - rank + t.ndim >= 0]
        out.append(next((x for x in dims if as_int(x) != 1), dims[0]))
    return out


def _py_floor_mod(x, y):
    return x % y


def _np_trunc_divide(x, y):
    """Division rounding toward zero, integers and floats (NumPy has it for neither)."""
    q = np.floor_divide(x, y)
    return np.where((np.mod(x, y) != 0) & ((x < 0) != (y < 0)), q + 1, q)


TABLE = [
    ("add", np.add, lambda x, y: x + y),
    ("sub", np.subtract, lambda x, y: x - y),
    ("mul", np.multiply, lambda x, y: x * y),
    ("div", np.true_divide, lambda x, y: x / y),
    ("floor_divide", np.floor_divide, lambda x, y: x // y),
    ("mod", np.mod, _py_floor_mod),
    ("trunc_divide", _np_trunc_divide, te.truncdiv),
    ("fmod", np.fmod, te.truncmod),
    ("pow", power, lambda x, y: te.power(x, y)),
    ("maximum", np.maximum, lambda x, y: te.max(x, y)),
    ("minimum", np.minimum, lambda x, y: te.min(x, y)),
]

def _reference(fn):
    def reference(inputs, attrs):
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # x // 0 == 0 is the semantics
            return [np.asarray(fn(*inputs)).astype(inputs[0].dtype)]

    return reference


for _name, _np_fn, _te_fn in TABLE:
    register(OpDef(
        name=_name,
        infer=_infer(_name),
        reference=_reference(_np_fn),
        compute=_compute(_te_fn),
        pattern="broadcast",
        num_inputs=(2, 2),
        doc=f"Elementwise {_name} with NumPy broadcasting.",
    ))
