"""A Tensor Core product's epilogue computed from the lanes' fragments (ember.cuda.fragment_epilogue):
GEMMs of odd M, N and K in float16 and bfloat16 on the interpreter with GPU semantics against
NumPy, in either epilogue (fragment_stores, the shared-memory tile kept selectable); a model's
products with each fused epilogue (bias, residual, ReLU, GELU, clip) in fp16 or bf16 against
torch (||out - ref|| / ||ref|| within 1e-2; whole models' in fp16: the zoo's small ResNet-18 and
MobileNetV2 in test_channels_last_models, GPT-2 in test_cuda_model_transformers), TF32's wmma
products keeping the tile (1e-3); both epilogues built by NVRTC, with what ptxas reports of
each, and run on a GPU where there is one; a marked epilogue the pass cannot place refused."""

import ml_dtypes
import numpy as np
import pytest
import torch
from gpu_kernels import needs_gpu, needs_nvrtc
from hypothesis import given, settings
from hypothesis import strategies as st
from model_cases import SIMULATED

import ember
from ember import te
from ember.cuda import nvrtc, tensorcore
from ember.cuda.fragment_epilogue import FRAGMENT_EPILOGUE
from ember.cuda.kernel import prepare
from ember.errors import LowerError

NUMPY = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TILES = ({"BM": 32, "BN": 32, "BK": 32, "WM": 16, "WN": 32},  # two warps of 16 rows
         {"BM": 64, "BN": 32, "BK": 16, "WM": 32, "WN": 16})  # four warps, two tiles of fragments each
STORE = "ember_mma_store("  # (the call storing fragments to a float tile in shared memory)


def _linear(M: int, N: int, K: int, dtype: str, *, fragment_stores: bool = True, tiles: dict = TILES[0]):
    """out = (x w^T + bias) in dtype, on Tensor Cores."""
    x, w = te.placeholder((M, K), dtype, name="x"), te.placeholder((N, K), dtype, name="w")
    bias = te.placeholder((N,), dtype, name="bias")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(x[i, k].astype("float32") * w[j, k].astype("float32"), axis=k),
                   name="C")
    out = te.compute((M, N), lambda i, j: (C[i, j] + bias[j].astype("float32")).astype(dtype), name="out")
    s = te.create_schedule(out.op)
    tensorcore.tensorcore_product(s, C, out, **tiles, fragment_stores=fragment_stores)
    return s, [x, w, bias, out]


def _run_linear(M, N, K, dtype, seed, target: str = "python", **options) -> None:
    s, args = _linear(M, N, K, dtype, **options)
    f = ember.build(s, args, target=target)  # ("python": the interpreter with GPU semantics)
    rng = np.random.default_rng(seed)
    x, w, bias = (rng.standard_normal(shape).astype(NUMPY[dtype]) for shape in ((M, K), (N, K), (N,)))
    out = np.full((M, N), np.nan, NUMPY[dtype])
    f(x, w, bias, out)
    expected = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=1e-2, atol=3e-2)


@settings(max_examples=8, deadline=None)
@given(M=st.integers(1, 70), N=st.integers(1, 70), K=st.integers(1, 70), dtype=st.sampled_from(sorted(NUMPY)),
       tiles=st.sampled_from(TILES), seed=st.integers(0, 2**16))
def test_products_of_any_shape_store_from_their_fragments_as_numpy_says(M, N, K, dtype, tiles, seed):
    _run_linear(M, N, K, dtype, seed, tiles=tiles)  # odd N: rows at odd offsets, pairs stored one by one


@pytest.mark.parametrize("dtype", sorted(NUMPY))
def test_the_shared_memory_epilogue_stays_selectable(dtype):
    _run_linear(37, 43, 40, dtype, 5, fragment_stores=False)
    s, args = _linear(37, 43, 40, dtype, fragment_stores=False)
    assert STORE in str(ember.lower(s, args, target="cuda"))
    s, args = _linear(37, 43, 40, dtype)
    assert STORE not in str(prepare(ember.lower(s, args, target="cuda")))


@needs_gpu
@pytest.mark.parametrize("dtype", sorted(NUMPY))
@pytest.mark.parametrize("fragment_stores", [True, False])
def test_both_epilogues_on_the_gpu(dtype, fragment_stores):
    for tiles in TILES:
        _run_linear(301, 259, 200, dtype, 9, target="cuda", fragment_stores=fragment_stores, tiles=tiles)


@needs_nvrtc
def test_both_epilogues_compile_and_the_fragments_need_less():
    """ptxas' report for sm_90 (both) and sm_80 (the fragments'): no spills; the tile's shared
    memory, the barrier after the products and the float2 stores into it gone, the output in
    half2 stores."""
    used, sources = {}, {}
    for fragments, arch in ((True, "sm_90"), (False, "sm_90"), (True, "sm_80")):
        s, args = _linear(37, 43, 40, "float16", fragment_stores=fragments)
        f = ember.build(s, args, target="cuda", arch=arch)
        (used[fragments, arch],) = nvrtc.resources(f.source, arch).values()
        sources[fragments] = f.source
    assert all(u.spill_stores == u.spill_loads == 0 for u in used.values())
    assert used[True, "sm_90"].shared < used[False, "sm_90"].shared
    assert used[True, "sm_90"].registers <= used[False, "sm_90"].registers
    assert sources[True].count("__syncthreads()") < sources[False].count("__syncthreads()")
    assert "reinterpret_cast<__half2*>" in sources[True] and "reinterpret_cast<__half2*>" not in sources[False]


def test_a_marked_epilogue_without_a_fragments_tile_is_refused():
    A = te.placeholder((16, 16), "float32", name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] * 2, name="B")
    s = te.create_schedule(B.op)
    s[B].pragma(s[B].op.axis[0], FRAGMENT_EPILOGUE, True)
    with pytest.raises(LowerError, match="reads 0 tiles stored from mma.sync's fragments"):
        prepare(ember.lower(s, [A, B], target="cuda"))


class _Epilogue(torch.nn.Module):
    """A linear layer of odd sizes and an epilogue fused into its kernel."""

    def __init__(self, epilogue: str):
        super().__init__()
        self.linear, self.epilogue = torch.nn.Linear(37, 43), epilogue

    def forward(self, x, r):
        y = self.linear(x)
        return {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "clip": lambda t: torch.clamp(t, -0.5, 0.5),
                "residual": lambda t: torch.relu(t + r), "bias": lambda t: t}[self.epilogue](y)


HALF = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}


def _compiled_epilogue(epilogue: str, precision: str):
    """(the model in float32, the one compiled in `precision`, fresh inputs of its type: half ones
    for fp16 and bf16, so that the product reads them as they are)."""
    torch.manual_seed(11)
    model = _Epilogue(epilogue).eval()
    typed = lambda *shape: torch.randn(*shape).to(HALF[precision])  # noqa: E731
    low = _Epilogue(epilogue).eval().to(HALF[precision])
    low.load_state_dict(model.state_dict())
    cm = ember.compile(low, (typed(29, 37), typed(29, 43)), target=SIMULATED, precision=precision)
    return model, cm, (typed(29, 37), typed(29, 43))


def _relative_error(got, ref) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def _checked(model, cm, inputs, tolerance: float) -> None:
    with torch.no_grad():
        ref = model(*(x.float() for x in inputs)).numpy()
    assert _relative_error(cm(*inputs).float().numpy(), ref) <= tolerance


@needs_nvrtc
@pytest.mark.parametrize("epilogue, precision", [("bias", "fp16"), ("relu", "bf16"), ("gelu", "fp16"),
                                                 ("clip", "bf16"), ("residual", "fp16")])
def test_a_products_fused_epilogue_is_computed_from_its_fragments(epilogue, precision):
    model, cm, inputs = _compiled_epilogue(epilogue, precision)
    _checked(model, cm, inputs, 1e-2)
    (product,) = [k for k in cm.kernels if "gemm" in k.ops]
    if epilogue != "bias":
        assert len(product.ops) > 1  # (the gemm and its epilogue's operators)
    assert "mma.sync" in cm.source and STORE not in cm.source


@needs_nvrtc
def test_tf32_products_on_wmma_keep_the_shared_tile():
    model, cm, inputs = _compiled_epilogue("relu", "tf32")
    _checked(model, cm, inputs, 1e-3)
    assert "m16n16k8.f32.tf32" in cm.source and "wmma.store" in cm.source
