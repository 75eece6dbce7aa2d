"""qgemm, im2col and qconv (ember/ops/quantized.py) and qdepthwise (ember/ops/qdepthwise.py) against
their NumPy references, exactly: each epilogue on the C target (tensorized onto vpdpbusd where the
target has avx512vnni), the portable C of a target without it and the interpreter; im2col + qgemm
and qdepthwise against torch's convolutions of the same integers; the errors of bad operands."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.ops.quantized import conv_weights, fold_weights, pack, unpack
from ember.target import Target, as_target
from ember.testing import build_op, check_op

RNG = np.random.default_rng()


def operands(m: int, k: int, n: int, scaled: bool = True) -> list[np.ndarray]:
    a = RNG.integers(0, 256, (m, k), dtype=np.uint8)
    w = RNG.integers(-128, 128, (k, n), dtype=np.int8)
    bias = RNG.integers(-20000, 20000, (n,), dtype=np.int32)
    scale = RNG.uniform(2e-5, 2e-4, (n,)).astype(np.float32)
    return [a, pack(w), bias] + ([scale] if scaled else [])


def test_packing_round_trips():
    w = RNG.integers(-128, 128, (12, 32), dtype=np.int8)
    np.testing.assert_array_equal(unpack(pack(w)), w)
    assert pack(w)[1, 2, 3].tolist() == w[8:12, 19].tolist()  # panel 1, K-group 2, column 16 + 3


@pytest.mark.parametrize("m, k, n, out, attrs", [
    (8, 64, 128, "int32", {}),  # a 4 x 4 tile: b's panels in registers (vnni.NATIVE)
    (7, 36, 64, "int32", {}),  # 7 x 4: the compiler's intrinsic (vnni.NATIVE_GCC)
    (6, 20, 48, "uint8", {"zero_point": 7}),
    (5, 8, 16, "float32", {}),
    (12, 36, 64, "int8", {"zero_point": -3, "lo": -3}),  # a ReLU fused into the clip
])
def test_qgemm_epilogues(m, k, n, out, attrs):
    print(f"avx512vnni in the target's features: {'avx512vnni' in as_target('c').features}")
    check_op("qgemm", operands(m, k, n, out != "int32"), {"out_dtype": out, **attrs}, 1e-6, 1e-6)


@pytest.mark.parametrize("target", [Target.x86("avx2"), "python"], ids=["c-avx2", "python"])
def test_qgemm_without_vnni(target):
    check_op("qgemm", operands(6, 20, 48), {"out_dtype": "uint8", "zero_point": 128}, 0, 0, targets=[target])


@pytest.mark.parametrize("dilations", [(1, 2), (2, 1)])  # (a kernel row's taps one run of bytes where W's is 1)
def test_conv_as_im2col_and_qgemm(dilations):
    """A 3x3 convolution with stride 2, padding and dilation: the patches of the NHWC input padded
    with the activations' zero point (so padding counts as zero), against torch's of (x - zp) and w."""
    zp = 9
    attrs = {"kernel": (3, 3), "strides": (2, 2), "dilations": dilations, "pads": (1, 2, 1, 0), "pad_value": zp}
    x = RNG.integers(0, 256, (2, 3, 9, 10), dtype=np.uint8)
    w = RNG.integers(-128, 128, (16, 3, 3, 3), dtype=np.int8)
    (cols,) = check_op("im2col", [x.transpose(0, 2, 3, 1).copy()], attrs, 0, 0, targets=("c", "python"))
    oh, ow = (9 + 2 - 2 * dilations[0] - 1) // 2 + 1, (10 + 2 - 2 * dilations[1] - 1) // 2 + 1
    assert cols.shape == (2 * oh * ow, 3 * 3 * 4)  # 3 channels padded to a whole K-group of 4
    wk = conv_weights(w)
    bias = (-zp * wk.astype(np.int32).sum(0)).astype(np.int32)  # the zero point's cost folded in
    (y,) = check_op("qgemm", [cols, pack(wk), bias], {}, 0, 0)
    xt = torch.from_numpy(x.astype(np.float64) - zp)
    ref = F.conv2d(F.pad(xt, (2, 0, 1, 1)), torch.from_numpy(w.astype(np.float64)), stride=2, dilation=dilations)
    np.testing.assert_array_equal(y.reshape(2, oh, ow, 16).transpose(0, 3, 1, 2), ref.numpy().astype(np.int32))


@pytest.mark.parametrize("shape, cout, kernel, stride, pads, targets", [
    ((1, 6, 7, 20), 16, (3, 3), (1, 1), (1, 1, 1, 1), ("c", "python")),  # rows >= columns: a row tile's patches
    ((1, 4, 5, 8), 48, (3, 3), (2, 2), (1, 0, 1, 2), ("c",)),  # fewer rows than columns: all of them, first
    ((1, 11, 10, 3), 16, (7, 7), (2, 2), (3, 3, 3, 3), ("c",)),  # a first layer's, from a padded copy
])
def test_qconv(shape, cout, kernel, stride, pads, targets):
    """qconv, qgemm over im2col's patches gathered by the kernel, against the two in NumPy."""
    zp = 5
    wp, bias, sums = fold_weights(conv_weights(RNG.integers(-128, 128, (cout, shape[3], *kernel), dtype=np.int8)),
                                  RNG.integers(-2000, 2000, cout, dtype=np.int32))
    scale = RNG.uniform(1e-4, 1e-3, len(bias)).astype(np.float32)
    x = RNG.integers(0, 256, shape, dtype=np.uint8)
    attrs = {"kernel": kernel, "strides": stride, "pads": pads, "pad_value": zp, "out_dtype": "uint8",
             "zero_point": 3}
    check_op("qconv", [x, wp, bias - zp * sums, scale], attrs, 0, 0, targets=targets)


def test_qconv_errors():
    """Patches of 3 x 3 taps of 8 channels (K = 72) against weights of K = 8, and int8 activations."""
    w, bias = TensorType((1, 2, 16, 4), "int8"), TensorType((16,), "int32")
    with pytest.raises(OpTypeError, match=r"qconv, qgemm over im2col's patches: qgemm: a has K = 72"):
        infer_types("qconv", [TensorType((1, 5, 5, 8), "uint8"), w, bias], {"kernel": (3, 3)})
    with pytest.raises(OpTypeError, match="uint8 activations"):
        infer_types("qconv", [TensorType((1, 5, 5, 8), "int8"), w, bias], {"kernel": (1, 1)})


def test_qconv_gathers_a_row_tile_at_a_time():
    """The C kernel of a 3x3 convolution of 56 x 56 x 64 copies each row tile's patches (7 rows
    of 9 taps of 64 channels) into a local array, not the whole im2col (3136 rows) to memory."""
    types = [TensorType((1, 56, 56, 64), "uint8"), TensorType((4, 144, 16, 4), "int8"), TensorType((64,), "int32")]
    source = build_op("qconv", types, {"kernel": (3, 3), "pads": (1, 1, 1, 1), "pad_value": 3}).kernel.source
    assert "uint8_t im2col_local[4032]" in source and "aligned_alloc" not in source


@pytest.mark.parametrize("shape, stride, pads, dilation, targets", [
    ((2, 9, 10, 32), (2, 2), (1, 1, 1, 1), (1, 1), ("c",)),  # the tile of 16-channel panels, two images
    ((2, 7, 7, 20), (1, 1), (1, 2, 0, 1), (1, 2), ("c", "python")),  # channels no panel divides
])
def test_depthwise(shape, stride, pads, dilation, targets):
    """qdepthwise against torch's depthwise convolution of (x - zp) by w, the zero point's cost in
    the bias: padded taps count as zero."""
    zp, c = 9, shape[3]
    x = RNG.integers(0, 256, shape, dtype=np.uint8)
    w = RNG.integers(-127, 128, (3, 3, c), dtype=np.int8)
    bias = (-zp * w.astype(np.int32).sum((0, 1)) + RNG.integers(-2000, 2000, c)).astype(np.int32)
    scale = RNG.uniform(1e-4, 1e-3, c).astype(np.float32)
    attrs = {"strides": stride, "pads": pads, "dilations": dilation, "pad_value": zp}
    (y,) = check_op("qdepthwise", [x, w, bias, scale], attrs, 1e-6, 1e-6, targets=targets)
    xt = F.pad(torch.from_numpy(x.transpose(0, 3, 1, 2).astype(np.float64) - zp), (pads[1], pads[3], pads[0], pads[2]))
    acc = F.conv2d(xt, torch.from_numpy(w.transpose(2, 0, 1)[:, None].astype(np.float64)), stride=stride,
                   dilation=dilation, groups=c).numpy()
    ref = (acc.transpose(0, 2, 3, 1).reshape(-1, c) + bias + zp * w.astype(np.int32).sum((0, 1))) * scale
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


def test_depthwise_pads_a_window_per_tile():
    """The C kernel pads the rows and columns each register tile reads (3 rows x 9 columns of 32
    channels for 7 output columns of one output row at stride 1) into a local array of bytes,
    each tap widening its vector as it loads it, where it padded and widened the whole input at
    the root."""
    types = [TensorType((1, 14, 14, 32), "uint8"), TensorType((3, 3, 32), "int8"), TensorType((32,), "int32"),
             TensorType((32,), "float32")]
    source = build_op("qdepthwise", types, {"pads": (1, 1, 1, 1), "pad_value": 3}).kernel.source
    assert "uint8_t qdepthwise_padded_local[864]" in source
    assert "ember_widen_uint8x16(ember_load_uint8x16(qdepthwise_padded_local + " in source
    assert "qdepthwise_padded =" not in source  # (no copy of the whole input)


@pytest.mark.parametrize("types, message", [
    ([((1, 5, 5, 16), "int8"), ((3, 3, 16), "int8"), ((16,), "int32"), ((16,), "float32")], "uint8 x"),
    ([((1, 5, 5, 16), "uint8"), ((3, 3, 8), "int8"), ((16,), "int32"), ((16,), "float32")], r"\(KH, KW, 16\)"),
    ([((1, 5, 5, 16), "uint8"), ((3, 3, 16), "int8"), ((8,), "int32"), ((16,), "float32")], "shape \\(16,\\)"),
    ([((1, 2, 2, 16), "uint8"), ((3, 3, 16), "int8"), ((16,), "int32"), ((16,), "float32")], "does not fit"),
])
def test_depthwise_errors(types, message):
    with pytest.raises(OpTypeError, match=message):
        infer_types("qdepthwise", [TensorType(s, d) for s, d in types], {})


@pytest.mark.parametrize("types, attrs, message", [
    ([((4, 8), "int8"), ((1, 2, 16, 4), "int8"), ((16,), "int32")], {}, "uint8 activations"),
    ([((4, 12), "uint8"), ((1, 2, 16, 4), "int8"), ((16,), "int32")], {}, "K = 12"),
    ([((4, 8), "uint8"), ((1, 2, 16, 4), "int8"), ((16,), "int32")], {"out_dtype": "uint8"}, "float32 scale"),
    ([((4, 8), "uint8"), ((1, 2, 16, 4), "int8"), ((16,), "int32"), ((16,), "float32")],
     {"out_dtype": "uint8", "lo": -1}, "leaves the range"),
])
def test_qgemm_errors(types, attrs, message):
    with pytest.raises(OpTypeError, match=message):
        infer_types("qgemm", [TensorType(s, d) for s, d in types], attrs)
