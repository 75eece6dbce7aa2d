"""Tensorized calls in CUDA C (ember.tir.schedule.tensorize): each intrinsic's CUDA source once in
the unit, then a call of it, its fragments named by their address in a "wmma.accumulator"
buffer (ember.cuda.fragments); an intrinsic the target GPU lacks (INTRINSIC_NEEDS, against
ember.target.CAPABILITIES) is a LowerError that says what to schedule instead.
"""

from __future__ import annotations

from ..codegen.cstyle import ADD
from ..codegen.routines import tensor_intrin_args
from ..errors import LowerError
from ..tir.stmt import CallRoutine, Stmt
from ..tir.tensor_intrin import get_intrin
from . import fragments

# what a tensorized call's intrinsic needs of the GPU (ember.target.CAPABILITIES): by the start of its
# name (mma.sync's steps, wmma's calls), and by its operands' type in it
INTRINSIC_NEEDS = {"start": (("mma_warp_", "mma"), ("wmma_", "wmma")),
                   "part": (("_bf16", "bfloat16"), ("_tf32", "tf32"))}


class TensorCalls:
    """The CUDA renderer's tensorized calls (a part of ember.cuda.codegen.CUDARenderer)."""

    def _other_stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        """A tensorized call: its intrinsic's CUDA source once in the unit, then the call, with
        the fragment an address of a "wmma.accumulator" buffer names (ember.cuda.fragments)."""
        params = dict(s.params) if isinstance(s, CallRoutine) else {}
        if "intrin" not in params:
            super()._other_stmt(s, depth, out)
            return
        name = params["intrin"]
        needs = [n for s, n in INTRINSIC_NEEDS["start"] if name.startswith(s)] + [
            n for p, n in INTRINSIC_NEEDS["part"] if p in name]
        if missing := [n for n in needs if not self.gpu.has(n)]:
            raise LowerError(f"Tensor Core intrinsic {params['intrin']} needs {', '.join(missing)}, which "
                             f"{self.gpu.arch} does not have (ember.target.CAPABILITIES): schedule the product on "
                             f"what the target GPU has (GPU.tensor_cores), e.g. tensorcore_gemm(intrinsic='wmma')")
        self._helper(f"tensor_intrin {params['intrin']}", get_intrin(params["intrin"]).c_source)
        reads, writes, scalars = tensor_intrin_args(s)
        args = [self._pointer(p, "const void*") for p in reads] + [self._pointer(p, "void*") for p in writes]
        args += [self._e(x) for x in scalars]
        out.append(f"{'  ' * depth}{s.routine}({', '.join(args)});")

    def _pointer(self, p, ctype: str) -> str:
        offset = self._e(p.offset, ADD)
        if p.buffer.scope == fragments.SCOPE:
            return fragments.address(p.buffer, self._buffer(p.buffer), offset)
        return f"({ctype})({self._buffer(p.buffer)} + {offset})"
