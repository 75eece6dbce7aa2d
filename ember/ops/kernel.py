"""One operator application as a kernel: te placeholders for its input types, its compute, and
its schedule (the OpDef's own, or the default for its pattern kind).

Symbolic dimensions become te size variables shared by name (`sym("batch")`), so kernels of one
model agree on them.
"""

from __future__ import annotations

from ..graph.core import Attrs, TensorType
from ..te import placeholder
from ..te.schedule import TESchedule
from ..te.tensor import Tensor
from ..tir.expr import PrimExpr, Var, convert
from .registry import get
from .schedules import default_schedule

_SYMBOLS: dict[str, Var] = {}


def sym(name: str) -> Var:
    """The size variable of a symbolic dimension name (one Var per name)."""
    if name not in _SYMBOLS:
        _SYMBOLS[name] = Var(name)
    return _SYMBOLS[name]


def te_shape(t: TensorType) -> tuple[PrimExpr, ...]:
    return tuple(sym(d) if isinstance(d, str) else convert(int(d)) for d in t.shape)


def compute_node(op_name: str, in_types: list[TensorType], attrs: Attrs, out_types: list[TensorType],
                 names: list[str] | None = None) -> tuple[list[Tensor], list[Tensor]]:
    """(input placeholders, output tensors) of one operator application."""
    op = get(op_name)
    names = names or [f"in{k}" for k in range(len(in_types))]
    inputs = [placeholder(te_shape(t), t.dtype, name=n) for t, n in zip(in_types, names)]
    outputs = list(op.compute(inputs, attrs, out_types))
    return inputs, outputs


def node_kernel(op_name: str, in_types: list[TensorType], attrs: Attrs, out_types: list[TensorType],
                names: list[str] | None = None, schedule: bool = True) -> tuple[TESchedule, list[Tensor]]:
    """A scheduled te kernel for one operator application, and its arguments (inputs, outputs)."""
    from ..te import create_schedule

    op = get(op_name)
    inputs, outputs = compute_node(op_name, in_types, attrs, out_types, names)
    s = create_schedule([t.op for t in outputs])
    if schedule:
        (op.schedule or (lambda s_, outs: default_schedule(s_, outs, op.pattern)))(s, outputs)
    return s, inputs + outputs
