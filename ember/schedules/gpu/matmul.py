"""GPU schedule of matmul, the product of two 2-D operands C = A @ B, where its tiles divide the
shape: float32 tiled in shared memory with a register tile per thread (ember.cuda.schedules.gemm:
64x64 block tiles, 4x4 a thread, 16-wide panels of k, 16-byte copies, the next panels copied
while this one's products run); float16 and bfloat16 on Tensor Cores, its float32 product cast
to the inputs' type (ember.cuda.schedules.tensorcore_matmul: 64x64 block tiles, 32x64 a warp).
Other products (batched, tiles that do not divide, symbolic sizes) decline: the default computes an output
element a thread, its reduction in a register."""

from __future__ import annotations

from ...cuda import schedules as gpu
from ...intrinsics import wmma
from ...te.tensor import PlaceholderOp
from ...tir.expr import as_int
from . import schedules

TILES = {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4}  # a tile of A or B: one float4 a thread


TENSOR_CORE = {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 64}


@schedules("matmul")
def schedule_matmul(s, outputs, target) -> bool | None:
    (C,) = outputs
    if C.dtype in wmma.DTYPES:
        return _tensor_cores(s, C)
    inputs = C.op.input_tensors
    if (C.ndim != 2 or C.dtype != "float32" or len(C.op.reduce_axis) != 1 or len(inputs) != 2
            or not all(isinstance(t.op, PlaceholderOp) and t.ndim == 2 for t in inputs)):
        return False
    (M, N), K = (as_int(d) for d in C.shape), as_int(C.op.reduce_axis[0].dom.extent)
    if None in (M, N, K) or M % TILES["BM"] or N % TILES["BN"] or K % TILES["BK"]:
        return False
    A, B = inputs
    gpu.gemm(s, A, B, C, **TILES, vector=4, stages=2)
    return None


def _tensor_cores(s, out) -> bool | None:
    """out = C cast to float16/bfloat16, C the float32 product of two 2-D placeholders."""
    if len(out.op.input_tensors) != 1:  # (an epilogue fused after the cast, or a batched product's broadcast)
        return False
    (C,) = out.op.input_tensors
    inputs = C.op.input_tensors
    if (out.ndim != 2 or out.op.reduce_axis or C.dtype != "float32" or len(C.op.reduce_axis) != 1
            or len(inputs) != 2 or not all(isinstance(t.op, PlaceholderOp) and t.ndim == 2 for t in inputs)):
        return False
    (M, N), K = (as_int(d) for d in out.shape), as_int(C.op.reduce_axis[0].dom.extent)
    if None in (M, N, K) or M % TENSOR_CORE["BM"] or N % TENSOR_CORE["BN"] or K % TENSOR_CORE["BK"]:
        return False
    gpu.tensorcore_matmul(s, *inputs, C, out, **TENSOR_CORE)
    return None
