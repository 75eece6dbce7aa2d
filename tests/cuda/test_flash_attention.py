"""flash_attention, the GPU's fused attention (ember.ops.flash_attention): run on the interpreter
with GPU semantics (blocks and threads shuffled, races checked) against the NumPy reference at
small sizes whose lengths are not multiples of the tiles (several query and key tiles), causal,
additive and bool masks (a row with every key masked out gives 0), on CUDA cores (float32, and
half operands whose head sizes are not multiples of 16) and on Tensor Cores (float16 and
bfloat16, head sizes multiples of 16); both kernels compiled by NVRTC to an sm_90 cubin."""

import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.target import Target
from ember.testing import build_op, check_op
from ember.tir import dtype as dt

GPU_INTERPRETER = (Target("python", schedules="gpu"),)
RNG = np.random.default_rng()
B, H, L, S = 1, 2, 37, 45  # tiles of 32: two of queries, two of keys


def operands(dtype="float32", e=4, ev=6, heads=H):
    shapes = (B, heads, L, e), (B, heads, S, e), (B, heads, S, ev)
    return [RNG.standard_normal(shape).astype(dt.to_numpy(dtype)) for shape in shapes]


def test_an_additive_mask_broadcast_and_a_scale():
    mask = RNG.standard_normal((B, 1, L, S)).astype("float32")  # broadcast over the heads
    check_op("flash_attention", [*operands(), mask], {"scale": 0.3}, rtol=1e-5, atol=1e-5, targets=GPU_INTERPRETER)


def keep_mask():
    keep = RNG.random((L, S)) < 0.7
    keep[3] = False  # every key of query 3 masked out: 0, as torch gives
    return keep


def test_a_bool_mask_with_causal_and_a_row_of_no_keys():
    (out,) = check_op("flash_attention", [*operands(), keep_mask()], {"causal": True}, rtol=1e-5, atol=1e-5,
                      targets=GPU_INTERPRETER)
    assert out.shape == (B, H, L, 6) and not out[:, :, 3].any()


def test_half_operands_on_cuda_cores_are_computed_in_fp32():
    check_op("flash_attention", operands("float16"), {"causal": True}, rtol=2e-3, atol=2e-3, targets=GPU_INTERPRETER)


@pytest.mark.parametrize("dtype, causal, mask", [("float16", True, "bool"), ("bfloat16", False, "additive")])
def test_on_tensor_cores(dtype, causal, mask):
    q, k, v = operands(dtype, 16, 16, heads=1)
    extra = [keep_mask()] if mask == "bool" else [RNG.standard_normal((L, S)).astype(q.dtype)]
    tol = {"float16": 3e-3, "bfloat16": 1.6e-2}[dtype]  # p rounded to the operands' type; bf16's output 2 ulps
    (out,) = check_op("flash_attention", [q, k, v, *extra], {"causal": causal}, rtol=tol, atol=tol,
                      targets=GPU_INTERPRETER)
    if mask == "bool":
        assert not out[:, :, 3].astype("float32").any()


@needs_nvrtc
@pytest.mark.parametrize("dtype, e", [("float32", 40), ("float16", 64)])
def test_nvrtc_compiles_it_for_sm_90_with_the_tiles_in_shared_memory(dtype, e):
    types = [TensorType((1, 2, 40, e), dtype)] * 3 + [TensorType((40, 40), dtype)]
    f = build_op("flash_attention", types, {"causal": True}, target=Target("cuda", simulate=True)).kernel
    assert f.binary[:4] == b"\x7fELF" and f.arch == "sm_90"
    assert f.grid == (2, 2, 1) and f.block[0] == 32
    if dtype == "float32":  # CUDA cores: only the k and v tiles take barriers
        assert f.source.count("__shared__") == 6 and f.source.count("__syncthreads()") == 2
    else:  # q k^T and p v on Tensor Cores
        assert f.source.count("__shared__") == 8 and f.source.count("ember_wmma_shared_mma_f16(") == 3


def test_head_sizes_past_shared_memory_are_refused():
    big = TensorType((1, 1, 8, 512), "float32")
    with pytest.raises(OpTypeError, match="fit the tiles in 49152 bytes of shared memory"):
        infer_types("flash_attention", [big, big, big], {})
