"""The GPU's Emitter: a program is a CUDA block, its block operations spread over the block's
threads (threads.py), with reductions (reduce.py), tl.dot (dot.py) and reads of loads (copies.py)
of its own; once the kernel is emitted, its body is rewritten: dots' accumulators kept in
fragments across loops (accumulate.py), a dot's operands copied 16 bytes at a time (copies.py;
swizzled for mma.sync unless the tile_mma option is off: ldmatrix.py), an accumulator in mma's
fragments stored from them by the lanes that hold it (epilogue.py), those copies issued
`num_stages - 1` iterations ahead (stages.py), blocks each thread touches only at its own elements
kept in registers (registers.py), and each buffer allocated around the statements that use it
(lifetimes.py).
"""

from __future__ import annotations

from ....tir.expr import PrimExpr, Var, const
from ....tir.stmt import THREAD_BINDING, For, Stmt, seq
from .accumulate import Accumulators
from .epilogue import FragmentStores
from .lifetimes import allocated_where_used
from .reduce import Reductions


class CUDAEmitter(Reductions, Accumulators, FragmentStores):
    """Block operations spread over 32 * num_warps threads of a CUDA block (the module doc)."""

    def __init__(self, target, debug: bool, num_warps: int = 4, num_stages: int = 3):
        self.gpu = target.gpu  # (the target GPU's facts, set first: the layers' constructors read them)
        super().__init__(debug, num_warps, num_stages)

    def kernel(self, pid: Var, programs: PrimExpr) -> Stmt:
        """The programs as blocks (blockIdx.x: the flattened grid), the scratch in each."""
        body = self._in_registers(self._accumulate_in_place(seq(*self.lists[0])))
        body = self._thread_own(self._pipelined(self._stored_from_fragments(self._vector_operands(body))))
        body = allocated_where_used(body, self.allocs)
        return For(pid, const(0), programs, THREAD_BINDING, body, (("thread_tag", "blockIdx.x"),))
