"""Winograd's F(2x2, 3x3) and F(4x4, 3x3) (ember.tir.winograd, the conv2d_winograd operator and its
routines): the transform matrices against the 1-D correlation they compute exactly, the packed
weights' layout, the operator's reference and kernels (C and the interpreter's NumPy twins)
against torch's conv2d at small shapes (odd maps, partial tiles, channels of half a vector, an odd
number of output blocks, with and without bias, residual and ReLU), and its shape errors."""

import numpy as np
import pytest
import torch

from ember.graph.core import TensorType
from ember.ops.layout import convert_layout
from ember.ops.registry import OpTypeError, infer_types
from ember.ops.winograd import plan
from ember.testing import check_op
from ember.tir.winograd import TILES, matrices, pack_weights


@pytest.mark.parametrize("m", TILES)
def test_matrices_compute_the_correlation(m):
    """A^T [(G g) . (B^T d)] is the m outputs of d correlated with g (Lavin and Gray's F(m, 3))."""
    bt, g, at = matrices(m)
    rng = np.random.default_rng(m)
    for _ in range(5):
        d, k = rng.standard_normal(m + 2), rng.standard_normal(3)
        want = np.array([d[i:i + 3] @ k for i in range(m)])
        np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


def test_packed_weights_layout():
    """U[tap, block, c, lane] = (G w[o, c] G^T) at tap, o = block * ob + lane."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 3, 3, 3))
    u = pack_weights(w, 2, 8)
    _, g, _ = matrices(2)
    assert u.shape == (16, 2, 3, 8) and u.dtype == np.float32
    o, c = 11, 2
    np.testing.assert_allclose(u[:, 1, c, 3].reshape(4, 4), g @ w[o, c] @ g.T, rtol=1e-6, atol=1e-6)


# (m, N, C, OC, H, W, ib, ob, padding top/left/bottom/right, bias, residual, relu)
CASES = [
    (4, 1, 16, 32, 9, 7, 16, 16, (1, 1, 1, 1), True, True, True),  # partial tiles both ways
    (2, 2, 24, 8, 5, 6, 8, 8, (1, 0, 1, 2), False, False, True),  # C not a multiple of 16: blocks of 8
    (4, 1, 16, 24, 6, 13, 16, 8, (0, 1, 2, 1), True, False, False),  # 3 output blocks of 8 from blocks of 16
    (2, 1, 16, 16, 3, 3, 16, 16, (0, 0, 0, 0), False, True, False),  # one output tile, unpadded
    (4, 1, 16, 32, 24, 24, 16, 16, (1, 1, 1, 1), True, True, True),  # two product calls, the second half empty
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"F{c[0]}-{c[3]}x{c[4]}x{c[5]}")
def test_kernel_against_torch(case):
    m, n, c, oc, h, w, ib, ob, pads, bias, residual, relu = case
    rng = np.random.default_rng(sum(case[:6]))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weights = (rng.standard_normal((oc, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    want = torch.nn.functional.conv2d(torch.from_numpy(padded), torch.from_numpy(weights),
                                      torch.from_numpy(b) if bias else None).numpy()
    r = rng.standard_normal(want.shape).astype(np.float32)
    want = np.maximum(want + r if residual else want, 0) if relu else want + r if residual else want
    inputs = [convert_layout(x, "NCHW", f"NCHW{ib}c"), pack_weights(weights, m, ob)]
    inputs += [b] if bias else []
    inputs += [convert_layout(r, "NCHW", f"NCHW{ob}c")] if residual else []
    attrs = {"padding": pads, "relu": relu, "residual": residual}
    for target in ("c", "python"):  # each against the operator's float64 reference
        out, = check_op("conv2d_winograd", inputs, attrs, rtol=1e-5, atol=2e-5, targets=(target,))
        got = convert_layout(out, f"NCHW{ob}c", "NCHW")
        # F(4x4) rounds more than F(2x2): both well inside fp32's 1e-4 of the direct form
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=target)
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < (2e-6 if m == 4 else 5e-7)


def test_register_tile_plan():
    """R tiles from the registers with the fewest padded tiles; RG so one call's sums fit."""
    assert plan(36, 4, 16, 2, 16) == (12, 2, 2)  # the last case above: 24 tiles a call
    assert plan(196, 4, 16, 4, 16) == (7, 4, 2)  # 14 x 14 tiles: 7 divides them; 36 x 28 x 2 vectors in L2
    assert plan(49, 2, 16, 32, 16)[0] == 7
    assert plan(16, 2, 16, 3, 16)[2] == 1  # an odd number of output blocks: one a register tile
    assert plan(100, 4, 8, 2, 8)[0] <= 6  # 16 registers: at most 6 x 2 accumulators


def test_shape_errors():
    x = TensorType((1, 2, 8, 8, 8))
    with pytest.raises(OpTypeError, match="16 or 36 taps"):
        infer_types("conv2d_winograd", [x, TensorType((25, 2, 16, 8))], {})
    with pytest.raises(OpTypeError, match="16 or 36 taps"):
        infer_types("conv2d_winograd", [x, TensorType((36, 2, 24, 8))], {})  # x has 16 channels
    with pytest.raises(OpTypeError, match="padding"):
        infer_types("conv2d_winograd", [x, TensorType((36, 2, 16, 8))], {"padding": (3, 3, 3, 3)})
    with pytest.raises(OpTypeError, match="residual"):
        infer_types("conv2d_winograd", [x, TensorType((36, 2, 16, 8)), TensorType((1, 2, 8, 8, 4))],
                    {"residual": True})
