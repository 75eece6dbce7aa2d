"""Tensor expressions to an unscheduled loop-IR function (`te.create_prim_func`).

Each ComputeOp becomes one block inside a loop nest with one loop per iteration variable
(spatial first, then reduce), in producer-before-consumer order under the root block; an
ExternOp becomes one block without iteration variables around its own statement. The
compute's own index variables become the block's iteration variables, so the body is copied
as written; the loops get fresh variables of the same names.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..tir.expr import BufferLoad, Var, cast, const, is_const
from ..tir.functor import mutate_expr
from ..tir.region import with_regions
from ..tir.stmt import (
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    For,
    IfThenElse,
    PrimFunc,
    Range,
    Stmt,
    seq,
)
from .tensor import ComputeOp, ExternOp, PlaceholderOp, Reduce, TEError, Tensor, TensorLoad, input_tensors_of


def create_prim_func(args: Sequence[Tensor], name: str = "main") -> PrimFunc:
    """The loop-IR function computing the compute tensors in `args` from the placeholders in it.

    Every placeholder the computation reads must be in `args`; computed tensors not in `args`
    become intermediate buffers of the root block.
    """
    args = list(args)
    for a in args:
        if not isinstance(a, Tensor):
            raise TEError(f"create_prim_func takes te Tensors, got {type(a).__name__}")
    arg_bufs = {a.buffer for a in args}
    outputs = [a for a in args if isinstance(a.op, ComputeOp | ExternOp)]
    if not outputs:
        raise TEError("create_prim_func: no computed tensor among the arguments")
    ops = input_tensors_of(outputs)
    nests: list[Stmt] = []
    intermediates = []
    for op in ops:
        if isinstance(op, PlaceholderOp):
            if op.output(0).buffer not in arg_bufs:
                raise TEError(
                    f"placeholder {op.name!r} is read by the computation but is not among the arguments"
                )
            continue
        intermediates += [t.buffer for t in op.outputs if t.buffer not in arg_bufs]
        nests.append(_extern_block(op) if isinstance(op, ExternOp) else _loop_nest(op))
    root = Block("root", (), (), (), seq(*nests), alloc_buffers=tuple(intermediates))
    return PrimFunc(name, tuple(a.buffer for a in args), BlockRealize((), const(True), root))


def _whole(buf) -> BufferRegion:
    return BufferRegion(buf, tuple(Range.from_extent(d) for d in buf.shape))


def _extern_block(op: ExternOp) -> Stmt:
    """The extern's statement in an opaque block that reads its inputs and writes its outputs whole."""
    reads = tuple(_whole(buf) for buf in dict.fromkeys(t.buffer for t in op.inputs))
    writes = tuple(_whole(t.buffer) for t in op.outputs)
    return BlockRealize((), const(True), Block(op.name, (), reads, writes, op.body))


def _loop_nest(op: ComputeOp) -> Stmt:
    spatial = tuple(op.axis)
    reduce = tuple(op.reduce_axis)
    bodies = [_plain(b) for b in op.body]
    body0 = bodies[0]
    idx = tuple(iv.var for iv in spatial)
    init = None
    if isinstance(body0, Reduce):
        out = op.outputs[0].buffer
        acc = BufferLoad(out, idx, out.dtype)
        update: Stmt = BufferStore(out, body0.combiner.combine(acc, body0.source), idx)
        if body0.condition is not None:
            update = IfThenElse(body0.condition, update)
        init = BufferStore(out, body0.combiner.identity(out.dtype), idx)
        body: Stmt = update
    else:
        body = seq(*(BufferStore(t.buffer, cast(t.buffer.dtype, b), idx) for t, b in zip(op.outputs, bodies)))
    iter_vars = spatial + reduce
    block = with_regions(Block(op.name, iter_vars, (), (), body, init))
    # Loops start at 0 (what split, fuse and compute_at assume, as in nest_over); an axis with a
    # nonzero start (te.reduce_axis((2, 10))) is bound to loop + start.
    loop_vars = [Var(iv.var.name) for iv in iter_vars]
    values = tuple(lv if is_const(iv.dom.min, 0) else lv + iv.dom.min for iv, lv in zip(iter_vars, loop_vars))
    stmt: Stmt = BlockRealize(values, const(True), block)
    for iv, lv in reversed(list(zip(iter_vars, loop_vars))):
        stmt = For(lv, const(0), iv.dom.extent, "serial", stmt)
    return stmt


def _plain(e):
    """A te body as loop IR: tensor loads become the buffer loads they stand for."""
    if isinstance(e, Reduce):
        cond = None if e.condition is None else _plain(e.condition)
        return Reduce(e.combiner, _plain(e.source), e.axis, cond, e.dtype)
    return mutate_expr(e, lambda x: BufferLoad(x.buffer, x.indices, x.dtype) if isinstance(x, TensorLoad) else None)


