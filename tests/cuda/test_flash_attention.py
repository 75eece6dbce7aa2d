"""flash_attention, the GPU's fused attention (ember.ops.flash_attention): run on the interpreter
with GPU semantics (blocks and threads shuffled, races checked) against the NumPy reference at
small sizes whose lengths are not multiples of the tiles (several query and key tiles), causal,
additive and bool masks (a row with every key masked out gives 0), half operands; compiled by
NVRTC to an sm_90 cubin; and written for a GPU target by unfold_attention."""

import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.target import Target
from ember.testing import build_op, check_op

GPU_INTERPRETER = (Target("python", schedules="gpu"),)
RNG = np.random.default_rng()
B, H, L, S, E, EV = 2, 1, 37, 45, 4, 6  # tiles of 32: two of queries, two of keys


def operands(dtype="float32"):
    return [RNG.standard_normal(shape).astype(dtype) for shape in ((B, H, L, E), (B, H, S, E), (B, H, S, EV))]


@pytest.mark.parametrize("causal", [False, True])
def test_against_numpy_over_several_tiles(causal):
    (out,) = check_op("flash_attention", operands(), {"causal": causal}, rtol=1e-5, atol=1e-5, targets=GPU_INTERPRETER)
    assert out.shape == (B, H, L, EV)


def test_an_additive_mask_broadcast_and_a_scale():
    mask = RNG.standard_normal((B, 1, L, S)).astype("float32")
    check_op("flash_attention", [*operands(), mask], {"scale": 0.3}, rtol=1e-5, atol=1e-5, targets=GPU_INTERPRETER)


def test_a_bool_mask_with_causal_and_a_row_of_no_keys():
    keep = RNG.random((L, S)) < 0.7
    keep[3] = False  # every key of query 3 masked out: 0, as torch gives
    (out,) = check_op("flash_attention", [*operands(), keep], {"causal": True}, rtol=1e-5, atol=1e-5,
                   targets=GPU_INTERPRETER)
    assert not out[:, :, 3].any()


def test_half_operands_are_computed_in_fp32():
    check_op("flash_attention", operands("float16"), {"causal": True}, rtol=2e-3, atol=2e-3, targets=GPU_INTERPRETER)


@needs_nvrtc
def test_nvrtc_compiles_it_for_sm_90_with_the_tiles_in_shared_memory():
    types = [TensorType((1, 2, 40, 64), "float16"), TensorType((1, 2, 40, 64), "float16"),
             TensorType((1, 2, 40, 64), "float16"), TensorType((40, 40), "float16")]
    f = build_op("flash_attention", types, {"causal": True}, target=Target("cuda", simulate=True)).kernel
    assert f.binary[:4] == b"\x7fELF" and f.arch == "sm_90"
    assert f.source.count("__shared__") == 6 and f.source.count("__syncthreads()") == 2  # the k and v tiles only
    assert f.grid == (2, 2, 1) and f.block == (32, 1, 1)


def test_head_sizes_past_shared_memory_are_refused():
    big = TensorType((1, 1, 8, 512), "float32")
    with pytest.raises(OpTypeError, match="fit the tiles in 49152 bytes of shared memory"):
        infer_types("flash_attention", [big, big, big], {})
