"""gemm_bf16 (ember.ops.matmul_bf16) against its reference and torch on
bf16-rounded operands, on the C target (the bf16 unit where the target has it) and the
interpreter (the same products on fp32 vectors)."""

import numpy as np
import torch

from ember.intrinsics.tiles import pack
from ember.testing import check_op, random_array
from ember.tir import dtype as dt

BF16 = dt.to_numpy("bfloat16")


def bf16(x: np.ndarray) -> torch.Tensor:
    """x rounded to bf16 (nearest even), as fp32."""
    return torch.from_numpy(np.asarray(x, np.float32)).bfloat16().float()


def test_gemm_bf16():
    rng = np.random.default_rng(0)
    a, w, c = random_array((24, 64), rng=rng), random_array((64, 48), rng=rng), random_array((48,), rng=rng)
    packed = pack(w.astype(BF16), 2)
    out, = check_op("gemm_bf16", [a, packed, c], {"beta": 0.5}, rtol=1e-5, atol=1e-5, targets=("c", "python"))
    np.testing.assert_allclose(out, bf16(a) @ bf16(w) + 0.5 * torch.from_numpy(c), rtol=1e-5, atol=1e-5)
