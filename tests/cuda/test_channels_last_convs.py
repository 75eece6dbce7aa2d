"""Channels-last convolutions as implicit GEMMs (ember.ops.conv_gemm's conv2d_nhwc_gemm): the
product on Tensor Cores (half) or CUDA cores (float32) on the interpreter with GPU semantics
against NumPy and torch, a property test over convolution shapes, and the kernels built by NVRTC
for sm_90: where 8 divides the channels the columns' tiles are copied 16 bytes at a time (one
cp.async, zero-filled in the padding: ember.cuda.lane_runs), else an element at a time staged in
registers; no spills."""

import re

import numpy as np
import pytest
from gpu_kernels import needs_gpu, needs_nvrtc
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.cuda import nvrtc
from ember.cuda.lane_runs import lane_free
from ember.graph.core import TensorType
from ember.ops.conv_gemm import nhwc_weights
from ember.ops.registry import OpTypeError, get, infer_types
from ember.schedules.apply import node_kernel
from ember.target import Target
from ember.testing import check_op, random_array
from ember.tir.expr import Binary, Const, Var

RNG = np.random.default_rng(25)
ON_INTERPRETER = Target("python", schedules="gpu")


def _inputs(n, c, h, w, oc, kernel, dtype="float16", bias=True):
    x = random_array((n, h, w, c), dtype, RNG)
    weights = nhwc_weights(random_array((oc, c, *kernel), dtype, RNG))
    return [x, weights, *([random_array((oc,), dtype, RNG)] if bias else [])]


def _torch_conv(attrs):
    def conv(x, w, *bias):
        import torch

        kh, kw = attrs["kernel"]
        pt, pl, pb, pr = attrs.get("padding", (0, 0, 0, 0))
        xs = torch.nn.functional.pad(x.permute(0, 3, 1, 2).float(), (pl, pr, pt, pb))
        w4 = w.float().reshape(w.shape[0], kh, kw, -1).permute(0, 3, 1, 2)
        out = torch.nn.functional.conv2d(xs, w4, bias[0].float() if bias else None, attrs.get("strides", (1, 1)))
        return out.permute(0, 2, 3, 1).to(x.dtype)

    return conv


CASES = {  # name: (inputs, attributes)
    "3x3, 16 channels, padded": (lambda: _inputs(1, 16, 6, 6, 8, (3, 3)), {"kernel": (3, 3), "padding": (1, 1, 1, 1)}),
    "3x3 stride 2, 8 channels, bf16": (lambda: _inputs(1, 8, 9, 7, 12, (3, 3), "bfloat16"),
                                       {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}),
    "stem: 3 channels, 7x7 stride 2": (lambda: _inputs(1, 3, 11, 11, 8, (7, 7)),
                                       {"kernel": (7, 7), "strides": (2, 2), "padding": (3, 3, 3, 3)}),
    "1x1, batch 2, no bias": (lambda: _inputs(2, 24, 5, 4, 6, (1, 1), bias=False), {"kernel": (1, 1)}),
    "1x1 stride 2, uneven padding": (lambda: _inputs(1, 16, 7, 7, 16, (1, 1)),
                                     {"kernel": (1, 1), "strides": (2, 2), "padding": (0, 1, 1, 0)}),
    "3x3, float32 on CUDA cores": (lambda: _inputs(1, 8, 8, 8, 16, (3, 3), "float32"),
                                   {"kernel": (3, 3), "padding": (1, 1, 1, 1)}),
}


@pytest.mark.parametrize("case", CASES)
def test_a_channels_last_convolution_matches_torch_on_the_interpreter(case):
    inputs, attrs = CASES[case]
    tol = 1e-4 if "float32" in case else 2e-2
    torch_fn = None if "bf16" in case else _torch_conv(attrs)  # (torch takes no NumPy bfloat16)
    check_op("conv2d_nhwc_gemm", inputs(), attrs, rtol=tol, atol=tol, torch_fn=torch_fn, targets=[ON_INTERPRETER])


@settings(max_examples=12, deadline=None)
@given(c=st.sampled_from([3, 8, 16, 24]), oc=st.integers(1, 20), h=st.integers(3, 8), w=st.integers(3, 8),
       k=st.sampled_from([1, 2, 3]), stride=st.sampled_from([1, 2]), pad=st.integers(0, 2),
       dtype=st.sampled_from(["float16", "bfloat16"]))
def test_channels_last_gathers_of_any_shape_match_numpy(c, oc, h, w, k, stride, pad, dtype):
    attrs = {"kernel": (k, k), "strides": (stride, stride), "padding": (pad, pad, pad, pad)}
    check_op("conv2d_nhwc_gemm", _inputs(1, c, h, w, oc, (k, k), dtype), attrs, rtol=2e-2, atol=2e-2,
             targets=[ON_INTERPRETER])


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_channels_last_depthwise_convolution_matches_torch_on_the_interpreter(dtype):
    from ember.ops.depthwise_nhwc import depthwise_weights

    x, w4, b = random_array((1, 7, 6, 24), dtype, RNG), random_array((24, 1, 3, 3), dtype, RNG), \
        random_array((24,), dtype, RNG)
    attrs = {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}

    def conv(x, w, b):
        import torch

        out = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2).float(), w.float().permute(2, 0, 1)[:, None], b.float(),
                                         stride=2, padding=1, groups=24)
        return out.permute(0, 2, 3, 1).to(x.dtype)

    tol = 1e-4 if dtype == "float32" else 1e-2
    w = np.ascontiguousarray(depthwise_weights(w4))
    check_op("depthwise_conv2d_nhwc", [x, w, b], attrs, rtol=tol, atol=tol, torch_fn=conv, targets=[ON_INTERPRETER])


def test_a_lane_leaves_divisions_by_multiples_of_its_vector():
    v, j = Var("v", "int32"), Var("j", "int32")
    q = j * 8 + v  # channel q of 16 a tap, 8 lanes at a time
    assert str(lane_free(Binary("//", q, Const(16, "int32"), "int32"), v, 8)) == str(j * 8 // 16)
    assert str(lane_free(Binary("%", q, Const(16, "int32"), "int32"), v, 8)) == str(j * 8 % 16 + v)
    assert lane_free(Binary("//", q, Const(3, "int32"), "int32"), v, 8) is None  # (3 channels: a run crosses taps)
    assert lane_free(Binary("//", j * 4 + v, Const(16, "int32"), "int32"), v, 8) is None  # (base not a multiple of 8)


def _built(inputs, attrs):
    types = [TensorType(x.shape, x.dtype.name) for x in inputs]
    bound, outs = infer_types("conv2d_nhwc_gemm", types, attrs)
    s, args = node_kernel("conv2d_nhwc_gemm", types, bound, outs, target=Target("cuda"))
    return ember.build(s, args, target="cuda", arch="sm_90")


@needs_nvrtc
@pytest.mark.parametrize("case", ["3x3, 16 channels, padded", "3x3 stride 2, 8 channels, bf16",
                                  "stem: 3 channels, 7x7 stride 2", "3x3, float32 on CUDA cores"])
def test_the_columns_are_copied_16_bytes_at_a_time_where_8_divides_the_channels(case):
    inputs, attrs = CASES[case]
    f = _built(inputs(), attrs)
    gathers = re.findall(r"cp\.async\.cg\.shared\.global \[%0\], \[%1\], 16, %2;.*?\"l\"\(&in0\[", f.source)
    staged = re.search(r"__half (\w+_regs)\[\d+\];", f.source) or re.search(r"__nv_bfloat16 (\w+_regs)\[", f.source)
    if "stem" in case:  # 3 channels: a run of 8 taps crosses (ky, kx): an element a lane, staged in registers
        assert not gathers and staged
    else:  # before the K loop and in it, zero-filled where the tap reads the padding (4 floats, 8 halves)
        assert len(gathers) == 2 and not staged
    (used,) = nvrtc.resources(f.source, "sm_90").values()
    assert 0 < used.registers <= 255 and used.spill_stores == used.spill_loads == 0


def test_split_k_partials_of_a_channels_last_convolution_match_numpy_on_the_interpreter():
    """(ember.passes.split_k: parts of the taps (ky, kx, c), a batch axis of the product)"""
    x, w = _inputs(1, 16, 5, 5, 8, (3, 3), bias=False)
    parts = np.ascontiguousarray(w.reshape(8, 3, 48).transpose(1, 0, 2)[:, None])  # (S, 1, OC, Q/S)
    attrs = {"kernel": (3, 3), "padding": (1, 1, 1, 1)}
    (got,) = check_op("conv2d_nhwc_gemm_partials", [x, parts], attrs, rtol=2e-2, atol=2e-2, targets=[ON_INTERPRETER])
    (whole,) = check_op("conv2d_nhwc_gemm", [x, w], attrs, rtol=2e-2, atol=2e-2, targets=[ON_INTERPRETER])
    np.testing.assert_allclose(got.sum(axis=0), whole.astype(np.float32), rtol=2e-2, atol=2e-2)


def test_a_channels_last_convolution_of_mismatched_shapes_is_refused_by_name():
    x = TensorType((1, 6, 6, 16), "float16")
    with pytest.raises(OpTypeError, match=r"conv2d_nhwc_gemm: w \(8, 143\) must have C\*KH\*KW = 144 columns"):
        infer_types("conv2d_nhwc_gemm", [x, TensorType((8, 143), "float16")], {"kernel": (3, 3)})
    with pytest.raises(OpTypeError, match=r"conv2d_nhwc_gemm: x \(N, H, W, C\)"):
        infer_types("conv2d_nhwc_gemm", [TensorType((6, 6, 16), "float16"), TensorType((8, 144), "float16")],
                    {"kernel": (3, 3)})
    with pytest.raises(OpTypeError, match=r"depthwise_conv2d_nhwc: w \(3, 3, 8\) must be \(KH, KW, C\) = \(3, 3, 16\)"):
        infer_types("depthwise_conv2d_nhwc", [x, TensorType((3, 3, 8), "float16")], {"kernel": (3, 3)})
    with pytest.raises(OpTypeError, match=r"max_pool2d_nhwc: x \(N, H, W, C\)"):
        infer_types("max_pool2d_nhwc", [TensorType((6, 6, 16), "float16")], {"kernel": (3, 3)})


@needs_gpu
@pytest.mark.parametrize("shape", [(64, 64, 14, 3, 1), (128, 64, 15, 3, 2), (3, 16, 23, 7, 2)])
def test_a_channels_last_convolution_is_right_on_the_gpu(shape):
    """(C, OC, H, kernel, stride) at ResNet-like sizes: the 16-byte copies zero-filled in the
    padding (cp.async's source size 0 at addresses outside the input), and a stem's elements."""
    c, oc, h, k, stride = shape
    inputs = _inputs(1, c, h, h, oc, (k, k))
    attrs = {"kernel": (k, k), "strides": (stride, stride), "padding": (k // 2,) * 4}
    f = _built(inputs, attrs)
    (expected,) = get("conv2d_nhwc_gemm").reference(inputs, attrs)
    out = np.full(expected.shape, np.nan, np.float16)
    f(*inputs, out)
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=2e-2, atol=2e-2)
