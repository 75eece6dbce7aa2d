"""gemm_bf16 and conv2d_bf16 (ember.ops.matmul_bf16) against their references and torch on
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


def test_conv2d_bf16_with_odd_taps_and_padding():
    """5 channels x 3 x 3 taps = 45 columns of weights, padded to 46 with zeros; stride 2, padding 1;
    2 x 5 x 5 = 50 output pixels, 4 blocks of 16 with the last one padded."""
    rng = np.random.default_rng(1)
    x, w, b = random_array((2, 5, 9, 9), rng=rng), random_array((16, 5, 3, 3), rng=rng), random_array((16,), rng=rng)
    rows = np.zeros((16, 46), BF16)
    rows[:, :45] = w.reshape(16, 45)
    attrs = {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1), "dilations": (1, 1)}
    out, = check_op("conv2d_bf16", [x, rows.reshape(16, 23, 2), b], attrs, rtol=1e-5, atol=1e-5,
                    targets=("c", "python"))
    ref = torch.nn.functional.conv2d(bf16(x), bf16(w), torch.from_numpy(b), stride=2, padding=1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
