"""The GPU's Emitter: a program is a CUDA block, its block operations spread over the block's
threads (threads.py), with reductions (reduce.py), tl.dot (dot.py) and reads of loads (copies.py)
of its own; once the kernel is emitted, its body is rewritten: dots' accumulators kept in
fragments across loops (accumulate.py), a dot's operands copied 16 bytes at a time (copies.py),
blocks each thread touches only at its own elements kept in registers (registers.py).
"""

from __future__ import annotations

from ....tir.expr import PrimExpr, Var, const
from ....tir.stmt import THREAD_BINDING, For, Stmt, seq
from .accumulate import Accumulators
from .copies import OperandCopies
from .reduce import Reductions


class CUDAEmitter(Reductions, Accumulators, OperandCopies):
    """Block operations spread over 32 * num_warps threads of a CUDA block (the module doc)."""

    def __init__(self, target, debug: bool, num_warps: int = 4):
        super().__init__(debug, num_warps)  # (the target: the CPU's Emitter reads its vectors; nothing here)

    def kernel(self, pid: Var, programs: PrimExpr) -> Stmt:
        """The programs as blocks (blockIdx.x: the flattened grid), the scratch in each."""
        body = self._in_registers(self._accumulate_in_place(seq(*self.lists[0])))
        body = self.allocated(self._thread_own(self._vector_operands(body)))
        return For(pid, const(0), programs, THREAD_BINDING, body, (("thread_tag", "blockIdx.x"),))
