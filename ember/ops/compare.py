"""Comparisons, logic and selection with NumPy broadcasting: equal, not_equal, less, less_equal,
greater, greater_equal (bool output), logical_and, logical_or (bool inputs), where(cond, x, y).

Comparisons take two inputs of one dtype (frontends insert `cast`); NaN compares as in C and
NumPy: unequal to everything, itself included.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from .binary import out_type_shape
from .common import broadcast_index, broadcast_shapes, result_dtype
from .registry import OpDef, OpTypeError, register

COMPARISONS = [
    ("equal", np.equal, lambda x, y: x == y),
    ("not_equal", np.not_equal, lambda x, y: x != y),
    ("less", np.less, lambda x, y: x < y),
    ("less_equal", np.less_equal, lambda x, y: x <= y),
    ("greater", np.greater, lambda x, y: x > y),
    ("greater_equal", np.greater_equal, lambda x, y: x >= y),
]
LOGIC = [
    ("logical_and", np.logical_and, lambda x, y: x & y),
    ("logical_or", np.logical_or, lambda x, y: x | y),
]


def _check_bool(op: str, what: str, t: TensorType) -> None:
    if not dt.is_bool(t.dtype):
        raise OpTypeError(f"{op}: {what} must be bool, got {t.dtype}")


def _infer(name: str, logic: bool):
    def infer(types: list[TensorType], attrs) -> list[TensorType]:
        a, b = types
        if logic:
            _check_bool(name, "the first input", a)
            _check_bool(name, "the second input", b)
        result_dtype(name, a, b)
        return [TensorType(broadcast_shapes(name, a.shape, b.shape), "bool")]

    return infer


def broadcast_compute(name: str, fn, inputs):
    """The te tensor of fn applied to the broadcast elements of `inputs`."""
    return te.compute(
        out_type_shape(*inputs),
        lambda *i: fn(*[t[broadcast_index(i, t.shape)] for t in inputs]),
        name=name,
    )


for _name, _np_fn, _te_fn in COMPARISONS + LOGIC:
    register(OpDef(
        name=_name,
        infer=_infer(_name, logic=(_name, _np_fn, _te_fn) in LOGIC),
        reference=(lambda f: lambda inputs, attrs: [np.asarray(f(*inputs))])(_np_fn),
        compute=(lambda n, f: lambda inputs, attrs, out_types: [broadcast_compute(n, f, inputs)])(_name, _te_fn),
        pattern="broadcast",
        num_inputs=(2, 2),
        doc=f"Elementwise {_name} with NumPy broadcasting; bool output.",
    ))


def _infer_where(types: list[TensorType], attrs) -> list[TensorType]:
    cond, x, y = types
    _check_bool("where", "the condition", cond)
    return [TensorType(broadcast_shapes("where", cond.shape, x.shape, y.shape), result_dtype("where", x, y))]


register(OpDef(
    name="where",
    infer=_infer_where,
    reference=lambda inputs, attrs: [np.where(*inputs)],
    compute=lambda inputs, attrs, out_types: [broadcast_compute("where", te.if_then_else, inputs)],
    pattern="broadcast",
    num_inputs=(3, 3),
    doc="where(cond, x, y): x where cond is True, else y, with NumPy broadcasting of all three.",
))
