"""GPU schedule of matmul: a float32 product of two 2-D operands, C = A @ B, tiled in shared
memory with a register tile per thread (ember.cuda.schedules.gemm: 64x64 block tiles, 4x4 a
thread, 8-wide panels of k, 16-byte copies, the next panels copied while this one's products
run) where those tiles divide its shape. Other products
(batched, float16/bfloat16, tiles that do not divide) decline: the default computes an output
element a thread, its reduction in a register."""

from __future__ import annotations

from ...cuda import schedules as gpu
from ...te.tensor import PlaceholderOp
from ...tir.expr import as_int
from . import schedules

TILES = {"BM": 64, "BN": 64, "BK": 8, "TM": 4, "TN": 4}


@schedules("matmul")
def schedule_matmul(s, outputs, target) -> bool | None:
    (C,) = outputs
    inputs = C.op.input_tensors
    if (C.ndim != 2 or C.dtype != "float32" or len(C.op.reduce_axis) != 1 or len(inputs) != 2
            or not all(isinstance(t.op, PlaceholderOp) and t.ndim == 2 for t in inputs)):
        return False
    (M, N), K = (as_int(d) for d in C.shape), as_int(C.op.reduce_axis[0].dom.extent)
    if M % TILES["BM"] or N % TILES["BN"] or K % TILES["BK"]:
        return False
    A, B = inputs
    gpu.gemm(s, A, B, C, **TILES, vector=4, stages=2)
    return None
