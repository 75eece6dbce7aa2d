"""Tensor expressions: what a kernel computes, without saying how (TVM's `te`).

A `Tensor` is an output of an operation: a `PlaceholderOp` (an input), a `ComputeOp` (each
element given by an expression of its indices) or an `ExternOp` (outputs written by a loop-IR
statement built by hand, for what an expression per element cannot say: a recurrence). Every
tensor owns the loop-IR `Buffer` it will live in, so `A[i, k]` is a load from that buffer (a
`TensorLoad`: one that also names its tensor, which is how a compute finds its inputs) and
`create_prim_func` only has to wrap each compute in loops and a block. Nothing is kept outside the tensors themselves.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import EmberError
from ..tir import dtype as dt
from ..tir.expr import Buffer, BufferLoad, PrimExpr, Var, convert
from ..tir.functor import visit_expr
from ..tir.stmt import IterVar, Range


class TEError(EmberError, ValueError):
    """A tensor expression that cannot be built as written."""


class Operation:
    name: str
    outputs: tuple[Tensor, ...]

    def output(self, i: int) -> Tensor:
        return self.outputs[i]

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return ()


class PlaceholderOp(Operation):
    def __init__(self, name: str, shape, dtype: str):
        self.name = name
        self.outputs = (Tensor(self, 0, Buffer(name, shape, dtype)),)


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(PrimExpr):
    """A reduction of `source` over `axis` with `combiner`; only valid at the top of a compute."""

    combiner: CommReducer
    source: PrimExpr
    axis: tuple[IterVar, ...]
    condition: PrimExpr | None
    dtype: str


class ComputeOp(Operation):
    def __init__(self, name: str, axis: tuple[IterVar, ...], bodies: tuple[PrimExpr, ...],
                 shape: tuple[PrimExpr, ...], tag: str = "", attrs=None):
        self.name = name
        self.axis = axis
        self.body = bodies
        self.tag = tag
        self.attrs = dict(attrs or {})
        reduces = [b for b in bodies if isinstance(b, Reduce)]
        if reduces and len(bodies) > 1:
            raise TEError(f"compute {name!r}: a reduction must be the only output of its compute")
        self.reduce_axis = reduces[0].axis if reduces else ()
        names = [name] if len(bodies) == 1 else [f"{name}.v{i}" for i in range(len(bodies))]
        self.outputs = tuple(
            Tensor(self, i, Buffer(n, shape, b.dtype)) for i, (n, b) in enumerate(zip(names, bodies))
        )

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        found: dict[Tensor, None] = {}

        def grab(e):
            if isinstance(e, TensorLoad):
                found.setdefault(e.tensor)
            elif isinstance(e, BufferLoad):
                raise TEError(f"compute {self.name!r} reads buffer {e.buffer.name}, which is not a te tensor; "
                              "index the tensor (A[i]) instead of its buffer")

        for b in self.body:
            if isinstance(b, Reduce):
                visit_expr(b.source, grab)
                if b.condition is not None:
                    visit_expr(b.condition, grab)
            else:
                visit_expr(b, grab)
        return tuple(found)


class ExternOp(Operation):
    """Outputs computed by a loop-IR statement built by hand (TVM's te.extern): `body` reads the
    input tensors' buffers and writes the outputs' buffers. It becomes one opaque block that
    reads its inputs and writes its outputs whole; schedules leave its loops as built."""

    def __init__(self, name: str, inputs: Sequence[Tensor], types: Sequence[tuple[tuple, str]], fbuild: Callable,
                 attrs=None):
        self.name = name
        self.inputs = tuple(inputs)
        self.attrs = dict(attrs or {})
        names = [name] if len(types) == 1 else [f"{name}.v{i}" for i in range(len(types))]
        self.outputs = tuple(Tensor(self, i, Buffer(n, _shape(shape), dtype))
                             for i, (n, (shape, dtype)) in enumerate(zip(names, types)))
        self.body = fbuild([t.buffer for t in self.inputs], [t.buffer for t in self.outputs])

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return self.inputs


@dataclass(frozen=True, eq=False, repr=False)
class TensorLoad(BufferLoad):
    """`A[i, k]`: a load of a te tensor's buffer that names the tensor (TVM's ProducerLoad);
    `create_prim_func` turns it into the plain BufferLoad it stands for."""

    tensor: Tensor


class Tensor:
    """One output of an operation; indexing it gives a load of its buffer."""

    def __init__(self, op: Operation, value_index: int, buffer: Buffer):
        self.op = op
        self.value_index = value_index
        self.buffer = buffer

    shape = property(lambda self: self.buffer.shape)
    dtype = property(lambda self: self.buffer.dtype)
    name = property(lambda self: self.buffer.name)
    ndim = property(lambda self: self.buffer.ndim)

    def __getitem__(self, indices) -> PrimExpr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise TEError(f"tensor {self.name} has {self.ndim} dimensions, indexed with {len(indices)}")
        load = self.buffer.load(indices)
        return TensorLoad(load.buffer, load.indices, load.dtype, self)

    def __repr__(self):
        shape = ", ".join(str(d) for d in self.shape)
        return f"Tensor({self.name}, ({shape}), {self.dtype})"


def _shape(shape) -> tuple[PrimExpr, ...]:
    if isinstance(shape, int | PrimExpr):
        shape = (shape,)
    return tuple(convert(d) for d in shape)


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    dt.check(dtype)
    return PlaceholderOp(name, _shape(shape), dtype).output(0)


def var(name: str = "n", dtype: str = dt.INDEX_DTYPE) -> Var:
    """A symbolic size (or scalar parameter); a kernel binds it from its argument shapes."""
    return Var(name, dtype)


size_var = var


def reduce_axis(dom, name: str = "rv") -> IterVar:
    """A reduction variable over [lo, hi)."""
    from ..tir.arith import simplify

    lo, hi = (convert(x) for x in dom)
    return IterVar(Var(name), Range(lo, simplify(hi - lo)), "reduce")


def compute(shape, fcompute: Callable, name: str = "compute", tag: str = "", attrs=None):
    """Define a tensor by the expression of one element, `fcompute(*indices)`.

    Returns one Tensor, or a list when fcompute returns a tuple (several outputs, one loop nest).
    """
    shape = _shape(shape)
    params = list(inspect.signature(fcompute).parameters.values())
    if len(params) == 1 and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        names = [f"i{d}" for d in range(len(shape))]
    else:
        names = [p.name for p in params]
        if len(names) != len(shape):
            raise TEError(f"compute {name!r}: shape has {len(shape)} dims but fcompute takes {len(names)}")
    axis = tuple(IterVar(Var(n), Range.from_extent(d), "spatial") for n, d in zip(names, shape))
    out = fcompute(*[iv.var for iv in axis])
    multi = isinstance(out, list | tuple)
    bodies = tuple(_as_body(o, name) for o in (out if multi else (out,)))
    op = ComputeOp(name, axis, bodies, shape, tag, attrs)
    return list(op.outputs) if multi else op.output(0)


def extern(types, inputs: Sequence[Tensor], fbuild: Callable, name: str = "extern", attrs=None) -> list[Tensor]:
    """Tensors of `types` ((shape, dtype) each) computed by the statement `fbuild(in_buffers,
    out_buffers)` returns (see ExternOp)."""
    for t in inputs:
        if not isinstance(t, Tensor):
            raise TEError(f"extern {name!r} takes te tensors as inputs, got {type(t).__name__}")
    for _, dtype in types:
        dt.check(dtype)
    return list(ExternOp(name, inputs, types, fbuild, attrs).outputs)


def _as_body(o, name: str) -> PrimExpr:
    if isinstance(o, Tensor):
        raise TEError(f"compute {name!r} returned a tensor; index it to return an element")
    e = convert(o)

    def no_nested_reduce(n):
        if isinstance(n, Reduce):
            raise TEError(
                f"compute {name!r}: a reduction (te.sum, te.max, ...) must be the whole body of a "
                "compute; compute it into its own tensor and use that"
            )

    if not isinstance(e, Reduce):
        visit_expr(e, no_nested_reduce)
    return e


# ---------------------------------------------------------------------------------------------
# Reductions


class CommReducer:
    """A commutative reducer: `combine(x, y)` and the identity element for a dtype."""

    def __init__(self, fcombine: Callable, fidentity: Callable, name: str = "reduce"):
        self.fcombine, self.fidentity, self.name = fcombine, fidentity, name

    def identity(self, dtype: str) -> PrimExpr:
        return convert(self.fidentity(dtype), dtype)

    def combine(self, x, y) -> PrimExpr:
        return convert(self.fcombine(x, y))

    def __call__(self, expr, axis=None, where=None, init=None):
        if axis is None or not _is_axes(axis):
            if axis is None:
                raise TEError(f"te.{self.name} needs axis=")
            return self.combine(expr, axis)  # te.max(a, b): elementwise; a literal takes the other's dtype
        axes = tuple(axis) if isinstance(axis, list | tuple) else (axis,)
        src = convert(expr)
        cond = convert(where) if where is not None else None
        if init is not None:
            raise TEError("te reducers take no init=; the identity of the reducer is used")
        return Reduce(self, src, axes, cond, src.dtype)


def _is_axes(a) -> bool:
    return isinstance(a, IterVar) or (isinstance(a, list | tuple) and all(isinstance(x, IterVar) for x in a))


def comm_reducer(fcombine: Callable, fidentity: Callable, name: str = "reduce") -> CommReducer:
    return CommReducer(fcombine, fidentity, name)


def _finite_bound(dtype: str, sign: int) -> float | None:
    """A narrow float without inf: its lowest (sign -1) or highest value, the identity of max or
    min (an infinity would be stored as NaN). None for every other dtype."""
    fmt = dt.MINIFLOATS.get(dt.element_of(dtype))
    if fmt is None or fmt.kind == "ieee":
        return None
    if fmt.kind == "e8m0":  # no sign: from 2**-127 up
        return fmt.value(0) if sign < 0 else fmt.value(fmt.max_code)
    return sign * fmt.value(fmt.max_code)


def _lowest(dtype: str):
    import numpy as np

    if dt.is_float(dtype):
        bound = _finite_bound(dtype, -1)
        return -np.inf if bound is None else bound
    return False if dt.is_bool(dtype) else dt.int_range(dtype)[0]


def _highest(dtype: str):
    import numpy as np

    if dt.is_float(dtype):
        bound = _finite_bound(dtype, 1)
        return np.inf if bound is None else bound
    return True if dt.is_bool(dtype) else dt.int_range(dtype)[1]


sum = comm_reducer(lambda x, y: x + y, lambda t: 0, "sum")  # noqa: A001
prod = comm_reducer(lambda x, y: x * y, lambda t: 1, "prod")
max = comm_reducer(lambda x, y: _bin("max", x, y), _lowest, "max")  # noqa: A001
min = comm_reducer(lambda x, y: _bin("min", x, y), _highest, "min")  # noqa: A001


def _bin(op, x, y):
    from ..tir.expr import binary

    return binary(op, x, y)


def input_tensors_of(outputs: Sequence[Tensor]) -> list[Operation]:
    """All operations reachable from `outputs`, producers before consumers."""
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op: Operation):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for t in outputs:
        visit(t.op)
    return order
