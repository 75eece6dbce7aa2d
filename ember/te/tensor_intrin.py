"""`te.decl_tensor_intrin(op, lower_fn, ...)`: declare a tensor intrinsic by its te compute and
how it is called, and register it by name for `sch.tensorize` (ember.tir.tensor_intrin).

    A = te.placeholder((4, 4), "float32", name="A")
    ...
    C = te.compute((4, 4), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

    def lower_fn(ins, outs):
        a, b = ins
        (c,) = outs
        body = te.call_extern("mm4", a.access_ptr("r"), b.access_ptr("r"), c.access_ptr("w"),
                              a.strides[0], b.strides[0], c.strides[0])
        reset = te.call_extern("mm4_reset", c.access_ptr("w"), c.strides[0])
        update = te.call_extern("mm4_update", ...)
        return body, reset, update        # or the body alone

    mm4 = te.decl_tensor_intrin(C.op, lower_fn, name="mm4", c_source=C_SOURCE)

Each formal buffer has unit stride in its last dimension and any stride in the others (a Var
that tensorize binds), unless `strides={tensor: (...)}` fixes them (ints, or None for any).
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..tir.expr import Binary, BufferLoad, Var, const, is_const
from ..tir.expr_functor import free_vars
from ..tir.stmt import CallRoutine
from ..tir.tensor_intrin import ROLES, IntrinBuffer, TensorIntrin, formal_stride, register_intrin
from .tensor import ComputeOp, PlaceholderOp, Tensor
from .to_tir import create_prim_func


def decl_tensor_intrin(op, lower_fn, name: str | None = None, *, c_source: str = "", strides: dict | None = None,
                       feature: str | None = None, override: bool = False, emulate=None) -> TensorIntrin:
    """Declare (and register under `name`, by default the op's) the intrinsic computing `op`;
    `emulate`: its calls' NumPy twin for the interpreter (ember.tir.tensor_intrin.TensorIntrin)."""
    if not isinstance(op, ComputeOp):
        raise ScheduleError(f"decl_tensor_intrin takes a te compute's op, got {type(op).__name__}")
    inputs = list(op.input_tensors)
    if not all(isinstance(t.op, PlaceholderOp) for t in inputs):
        raise ScheduleError(f"the description of a tensor intrinsic reads placeholders only; {op.name} reads "
                            f"{[t.op.name for t in inputs if not isinstance(t.op, PlaceholderOp)]}")
    tensors: list[Tensor] = [*inputs, *op.outputs]
    desc = create_prim_func(tensors, name=name or op.name)
    if not all(is_const(iv.dom.min, 0) for iv in (*op.axis, *op.reduce_axis)):
        raise ScheduleError("the axes of a tensor intrinsic's description start at 0")
    given = strides or {}
    formal = []
    for t in tensors:
        st = given.get(t)
        if st is None:
            st = [None] * (len(t.shape) - 1) + [1]
        if len(st) != len(t.shape):
            raise ScheduleError(f"strides of {t.op.name}: {len(st)} given for {len(t.shape)} dimensions")
        formal.append(tuple(formal_stride(f"{t.op.name}_stride{i}") if s is None else const(int(s))
                            for i, s in enumerate(st)))
    bufs = [IntrinBuffer(t.buffer, st) for t, st in zip(tensors, formal)]
    made = lower_fn(bufs[:len(inputs)], bufs[len(inputs):])
    calls = _roles(made, desc.name)
    intrin = TensorIntrin(desc.name, desc, len(inputs), tuple(formal), calls, c_source, feature, emulate)
    _check(intrin, op)
    return register_intrin(intrin, override)


decl_tensor_intrinsic = decl_tensor_intrin


def _roles(made, name: str) -> tuple:
    parts = made if isinstance(made, tuple | list) else (made,)
    if len(parts) not in (1, 3):
        raise ScheduleError(f"lower_fn of {name} returns a body, or (body, reset, update); got {len(parts)} values")
    calls = []
    for role, c in zip(ROLES, parts):
        if c is None:
            continue
        if not isinstance(c, CallRoutine):
            raise ScheduleError(f"the {role} of {name} must be one te.call_extern, got {type(c).__name__}")
        calls.append((role, c))
    return tuple(calls)


def _check(it: TensorIntrin, op: ComputeOp) -> None:
    """The calls use the formal buffers and strides only; reset and update, a sum reduction."""
    params = set(it.desc.params)
    known = set(it.stride_vars)
    for role, c in it.calls:
        for p in c.reads + c.writes:
            if p.buffer not in params:
                raise ScheduleError(f"the {role} of {it.name} passes {p.buffer.name}, not an argument of lower_fn")
        for x in c.scalars:
            stray = [v.name for v in free_vars(x) if isinstance(v, Var) and v not in known]
            if stray:
                raise ScheduleError(f"the {role} of {it.name} passes {x}, which uses {stray}: only the formal "
                                    f"buffers' strides are known at the call")
    has = {role for role, _ in it.calls}
    if has & {"reset", "update"}:
        block = it.desc_nest()[1].block
        body = block.body
        summed = (block.init is not None and isinstance(body.value, Binary) and body.value.op == "+"
                  and isinstance(body.value.a, BufferLoad) and body.value.a.buffer is body.buffer)
        if not summed or len(op.outputs) != 1:
            raise ScheduleError(f"{it.name} has a reset or an update, so its description must be a sum reduction "
                                f"of one output")
        if "body" not in has and has != {"reset", "update"}:
            raise ScheduleError(f"{it.name} has {sorted(has)}: a reset comes with an update")
