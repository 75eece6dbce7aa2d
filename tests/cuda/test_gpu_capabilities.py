"""What a GPU's architecture has (ember.target.CAPABILITIES, read through GPU.has and
GPU.tensor_cores), and every Tensor Core or cp.async choice following the target's: on sm_75 (a
T4) no mma.sync of m16n8k16, no bfloat16 on the Tensor Cores and no cp.async, so flash attention
takes wmma for float16 and CUDA cores for bfloat16, a model's half products wmma, the tile
compiler's tl.dot wmma (bfloat16: CUDA cores), and the renderer plain copies; on sm_80 all of
them. Each kernel is compiled by NVRTC for the target's architecture (the renderer takes it from
the target's GPU, no default of its own) and run on the interpreter against NumPy."""

import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

from ember.cuda.codegen import CUDARenderer
from ember.graph.core import TensorType
from ember.ops.flash_attention import choose
from ember.ops.registry import infer_types
from ember.schedules.apply import node_kernel
from ember.target import ARCHS, CAPABILITIES, GPU, Target
from ember.testing import build_op, check_op
from ember.tir import dtype as dt

RNG = np.random.default_rng()
T4, A100 = GPU.of("sm_75"), GPU.of("sm_80")


def test_an_architecture_has_what_its_compute_capability_brought():
    assert (T4.capability, A100.capability, GPU().capability) == (75, 80, 90)
    assert T4.has("wmma") and T4.has("ldmatrix") and not T4.has("mma") and not T4.has("cp_async")
    assert all(A100.has(x) for x in CAPABILITIES) and not GPU.of("sm_70").has("ldmatrix")
    assert T4.tensor_cores("float16") == ("wmma",) and T4.tensor_cores("bfloat16") == T4.tensor_cores("float32") == ()
    assert A100.tensor_cores("float16") == A100.tensor_cores("bfloat16") == ("mma", "wmma")
    assert A100.tensor_cores("float32") == ("wmma",) and A100.tensor_cores("int8") == ()
    assert GPU.of("sm_90a").has("mma") and GPU.of("compute_75").tensor_cores("float16") == ("wmma",)
    assert all(GPU.of(arch).tensor_cores("float16") for arch in ARCHS)  # (every row since sm_70)


def test_flash_attention_chooses_by_the_architecture():
    assert choose("float16", 64, 64, A100) == choose("bfloat16", 64, 64, GPU()) == "mma"
    assert choose("float16", 64, 64, T4) == "wmma"  # no m16n8k16 before sm_80
    assert choose("bfloat16", 64, 64, T4) == "cuda cores"  # no bfloat16 on its Tensor Cores
    assert choose("float32", 64, 64, A100) == choose(None, 64, 64, A100) == "cuda cores"


def attention(dtype: str):
    shapes = (1, 1, 37, 16), (1, 1, 45, 16), (1, 1, 45, 16)
    return [RNG.standard_normal(s).astype(dt.to_numpy(dtype)) for s in shapes]


@needs_nvrtc
@pytest.mark.parametrize("dtype, kind", [("float16", "wmma"), ("bfloat16", "cuda cores")])
def test_flash_attention_for_sm_75_is_compiled_for_it_and_right(dtype, kind):
    target = Target("cuda", simulate=True, gpu=T4)
    types = [TensorType(x.shape, dtype) for x in attention(dtype)]
    f = build_op("flash_attention", types, {"causal": True}, target=target).kernel
    assert f.arch == "sm_75" and f.binary[:4] == b"\x7fELF"
    assert "m16n8k16" not in f.source and "cp.async" not in f.source and "ldmatrix" not in f.source
    assert ("wmma.mma.sync" in f.source) == (kind == "wmma")
    tol = {"float16": 3e-3, "bfloat16": 1.6e-2}[dtype]
    check_op("flash_attention", attention(dtype), {"causal": True}, rtol=tol, atol=tol,
             targets=(Target("python", schedules="gpu", gpu=T4),))


@needs_nvrtc
@pytest.mark.parametrize("gpu, dtype, calls", [(T4, "float16", "wmma"), (A100, "float16", "mma"),
                                               (A100, "bfloat16", "mma"), (T4, "bfloat16", None)])
def test_a_half_product_takes_the_tensor_cores_its_gpu_has(gpu, dtype, calls):
    import ember

    a, b = (RNG.standard_normal(shape).astype(dt.to_numpy(dtype)) for shape in ((64, 48), (48, 80)))
    types = [TensorType(x.shape, dtype) for x in (a, b)]
    bound, outs = infer_types("matmul", types, {})
    target = Target("cuda", gpu=gpu)
    s, args = node_kernel("matmul", types, bound, outs, target=target)
    f = ember.build(s, args, target=target)
    assert f.arch == gpu.arch and f.binary[:4] == b"\x7fELF"
    assert ("m16n8k16" in f.source) == (calls == "mma") and ("wmma.mma.sync" in f.source) == (calls == "wmma")
    assert "cp.async" not in f.source or gpu.has("cp_async")
    check_op("matmul", [a, b], {}, rtol=1e-2, atol=1e-2, targets=[Target("python", schedules="gpu", gpu=gpu)])


def test_the_renderer_copies_asynchronously_where_the_targets_gpu_has_cp_async():
    assert CUDARenderer(A100).async_copies and not CUDARenderer(T4).async_copies


@needs_nvrtc
def test_a_tensor_core_schedule_the_targets_gpu_lacks_is_a_clear_error():
    import ember
    from ember.cuda import tensorcore
    from ember.errors import LowerError

    s, args = tensorcore.tensorcore_gemm(128, 128, 64, intrinsic="mma")
    with pytest.raises(LowerError, match="mma_warp_64x64x16_f16_f32 needs mma, which sm_75 does not have"):
        ember.build(s, args, target=Target("cuda", gpu=T4))
    s, args = tensorcore.tensorcore_gemm(128, 128, 64, "bfloat16", intrinsic="wmma")
    with pytest.raises(LowerError, match="needs bfloat16, which sm_75 does not have"):
        ember.build(s, args, target=Target("cuda", gpu=T4))
    s, args = tensorcore.tensorcore_gemm(128, 128, 64, intrinsic="wmma")
    assert "wmma.mma.sync" in ember.build(s, args, target=Target("cuda", gpu=T4)).source


@needs_nvrtc
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_model_for_sm_75_builds_every_kernel_for_it_and_is_right(precision):
    """A linear layer (split in parts of K) and its GELU for a T4 in half precision: float16 on wmma,
    bfloat16's product on CUDA cores (the default schedule), every kernel compiled for sm_75 with
    no mma.sync and no cp.async, run on the interpreter against NumPy."""
    import math

    import ember
    from ember.graph import Graph
    from ember.ops.nodes import add_op

    w, b = RNG.standard_normal((512, 16)).astype("float32"), RNG.standard_normal(16).astype("float32")
    g = Graph()
    x = g.add_input("x", TensorType((4, 512)))
    (h,) = add_op(g, "gemm", [x, g.add_constant(w, "w"), g.add_constant(b, "b")])
    g.set_outputs(add_op(g, "gelu", [h]))
    cm = ember.compile(g, target=Target("cuda", simulate=True, gpu=T4), precision=precision)
    assert "m16n8k16" not in cm.source and "cp.async" not in cm.source and "ldmatrix" not in cm.source
    assert ("wmma.mma.sync" in cm.source) == (precision == "fp16")
    x = RNG.standard_normal((4, 512)).astype("float32")
    y = x.astype(np.float64) @ w + b
    want = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    assert np.linalg.norm(cm(x) - want) / np.linalg.norm(want) <= 1e-2
