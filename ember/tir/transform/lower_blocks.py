"""Remove blocks: substitute each block's bindings into its body, turn its predicate into a guard
and an init left in place into a store guarded by "every reduction variable is at its start".
Allocations of the root block that compaction did not place go at the top of the function.
"""

from __future__ import annotations

from ..expr import Const, all_
from ..functor import mutate_stmt, substitute_stmt
from ..stmt import Allocate, BlockRealize, IfThenElse, PrimFunc, Stmt, seq


def lower_blocks(func: PrimFunc) -> PrimFunc:
    def f(s: Stmt):
        if not isinstance(s, BlockRealize):
            return None
        block = s.block
        vmap = {iv.var: v for iv, v in zip(block.iter_vars, s.iter_values)}
        body = block.body
        if block.init is not None:
            first = all_(*(iv.var == iv.dom.min for iv in block.iter_vars if iv.kind == "reduce"))
            body = seq(IfThenElse(first, block.init), body)
        body = substitute_stmt(body, vmap)
        pred = s.predicate
        if not (isinstance(pred, Const) and pred.value is True):
            body = IfThenElse(pred, body)
        for buf in reversed(block.alloc_buffers):
            body = Allocate(buf, body)
        return body

    return func.with_body(mutate_stmt(func.body, f_stmt=f))
