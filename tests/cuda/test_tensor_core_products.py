"""The products of a model in float16/bfloat16 on Tensor Cores at any shape (ember.schedules.gpu.
matmul, ember.cuda.tensorcore.tensorcore_product): linear layers (weights read transposed) with
their bias, batched and broadcast matmul, M, N and K that the tiles do not divide (padded with
zeros), batch-1 rows, convolutions as implicit GEMMs (ember.ops.conv_gemm), float32 products marked
tf32 as TF32, symbolic M, N and K (a model's tokens; attention's length as K, its loop pipelined);
each on the interpreter with GPU semantics against NumPy and compiled by NVRTC for sm_90."""

import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

import ember
from ember.graph import Graph
from ember.graph.core import TensorType
from ember.ops.bits import round_tf32
from ember.ops.nodes import add_op
from ember.ops.registry import infer_types
from ember.schedules.apply import node_kernel
from ember.schedules.gpu import product_choices
from ember.schedules.gpu.matmul import SMS, tensor_core_tiles
from ember.schedules.gpu.split_k import splits_for
from ember.target import Target
from ember.testing import check_op, check_op_sizes, random_array

RNG = np.random.default_rng(31)
ON_INTERPRETER = Target("python", schedules="gpu")


def _h(*shape, dtype="float16"):
    return random_array(shape, dtype, RNG)


def _tf32(*shape):  # float32 values that are TF32 already, as a "tf32" model's operands are
    return round_tf32(random_array(shape, "float32", RNG))


CASES = {  # name: (operator, inputs, attributes)
    "linear, one row": ("gemm", lambda: [_h(1, 24), _h(40, 24), _h(40)], {"trans_b": True}),
    "linear, partial tiles": ("gemm", lambda: [_h(5, 40), _h(48, 40), _h(48)], {"trans_b": True}),
    "gemm, bf16, partial tiles": ("gemm", lambda: [_h(33, 48, dtype="bfloat16"), _h(48, 17, dtype="bfloat16")], {}),
    "batched": ("matmul", lambda: [_h(2, 20, 24), _h(2, 24, 36)], {}),
    "broadcast batch, bf16": ("matmul", lambda: [_h(2, 3, 20, 24, dtype="bfloat16"), _h(1, 24, 36, dtype="bfloat16")],
                              {}),
    # convolutions as implicit GEMMs: the columns computed as their tiles are copied
    "conv 3x3, padded": ("conv2d_gemm", lambda: [_h(1, 3, 7, 7), _h(8, 27), _h(8)], {"kernel": (3, 3),
                                                                                   "padding": (1, 1, 1, 1)}),
    "conv 2x2, stride 2, bf16": ("conv2d_gemm", lambda: [_h(1, 3, 9, 9, dtype="bfloat16"), _h(5, 12, dtype="bfloat16")],
                                 {"kernel": (2, 2), "strides": (2, 2), "padding": (0, 1, 1, 0)}),
    "conv 3x3, 16 channels": ("conv2d_gemm", lambda: [_h(1, 16, 6, 6), _h(8, 144)], {"kernel": (3, 3),
                                                                                       "padding": (1, 1, 1, 1)}),
    "conv 1x1, batch 2": ("conv2d_gemm", lambda: [_h(2, 4, 6, 5), _h(6, 4)], {"kernel": (1, 1)}),
    # float32 products marked tf32 (ember.passes.tf32_products): m16n16k8 steps
    "linear, tf32": ("gemm", lambda: [_tf32(5, 40), _tf32(24, 40), _tf32(24)], {"trans_b": True, "tf32": True}),
}


@pytest.mark.parametrize("case", CASES)
def test_a_product_on_tensor_cores_matches_numpy_on_the_interpreter(case):
    name, inputs, attrs = CASES[case]
    check_op(name, inputs(), attrs, rtol=1e-2, atol=1e-2, targets=[ON_INTERPRETER])


@needs_nvrtc
@pytest.mark.parametrize("case", ["linear, partial tiles", "conv 3x3, padded", "linear, tf32"])
def test_a_product_on_tensor_cores_compiles_for_sm90(case):
    name, inputs, attrs = CASES[case]
    types = [TensorType(x.shape, x.dtype.name) for x in inputs()]
    bound, outs = infer_types(name, types, attrs)
    s, args = node_kernel(name, types, bound, outs, target=Target("cuda"))
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.binary[:4] == b"\x7fELF"
    # mma.sync on swizzled tiles where their rows are a power of two bytes, else (and TF32) wmma
    assert ("wmma.mma.sync" if "tf32" in case else "mma.sync.aligned.m16n8k16") in f.source
    assert ("m16n16k8.f32.tf32" in f.source) == attrs.get("tf32", False)
    if attrs.get("trans_b"):  # the weights (N, K) read as B's columns, in place: ldmatrix untransposed
        assert ("wmma.load.b.sync.aligned.col" if "tf32" in case else "_bt(") in f.source
        assert "ember_ldmatrix_x4_trans(fb" not in f.source


def test_tiles_shrink_until_the_grid_fills_the_gpu():
    assert tensor_core_tiles(1, 4096, 4096, 4096) == {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "stages": 3}
    small = tensor_core_tiles(1, 128, 3072, 768)  # BERT-base's MLP at 128 tokens, batch 1
    assert small["BM"] * small["BN"] < 64 * 64 and 128 // small["BM"] * 3072 // small["BN"] >= SMS
    assert tensor_core_tiles(1, 1, 768, 768)["BM"] == 16  # a decoded token: one row
    assert tensor_core_tiles(12, 128, 128, 64)["BK"] == 32
    # ResNet-18's 3x3 convolution at 14x14 in 3 parts of 768 taps: 32x32 blocks of two warps, 24 steps in 3 stages
    assert tensor_core_tiles(3, 256, 196, 768) == {"BM": 32, "BN": 32, "BK": 32, "WM": 32, "WN": 16, "stages": 3}
    assert tensor_core_tiles(1, 128, 784, 64)["stages"] == 2  # a 1x1 convolution of 64 channels: 2 steps of k


def test_a_measured_choice_overrides_the_rules(monkeypatch):
    tiles = {"BM": 64, "BN": 64, "BK": 64, "WM": 32, "WN": 32, "stages": 2}
    monkeypatch.setitem(product_choices.TILES, (4, 512, 49, 1152), tiles)
    monkeypatch.setitem(product_choices.SPLITS, (512, 49, 4608), 4)
    assert tensor_core_tiles(4, 512, 49, 1152) == tiles and splits_for(1, 512, 49, 4608) == 4
    assert splits_for(1, 256, 196, 2304) == 3  # (the rules for the others)


def test_a_choice_changed_at_run_time_is_another_kernel_never_a_stale_one(monkeypatch, tmp_path):
    """product_choices' entries in force are part of a GPU kernel's keys (ember.lowering's, in the
    process and on disk), so a model compiled again under another entry gets the entry's tiles."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    g = Graph()
    a, b = g.add_input("a", TensorType((64, 32), "float16")), g.add_input("b", TensorType((32, 64), "float16"))
    g.set_outputs(add_op(g, "matmul", [a, b]))
    target = Target("cuda", simulate=True)
    rules = ember.compile(g, target=target).source
    with monkeypatch.context() as m:
        m.setitem(product_choices.TILES, (1, 64, 64, 32), {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32,
                                                           "stages": 2})
        assert product_choices.changed()
        cm = ember.compile(g, target=target)
        x, y = _h(64, 32), _h(32, 64)
        want = x.astype(np.float64) @ y
        np.testing.assert_allclose(cm(x, y).astype(np.float64), want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    # the rules' 32x32 block of 2 warps, the entry's 64x64 of 4
    assert "__launch_bounds__(64)" in rules and "__launch_bounds__(128)" in cm.source
    assert not product_choices.changed() and ember.compile(g, target=target).source == rules


SYMBOLIC = {  # name: (operator, input types, attributes, the inputs at a size)
    "linear, symbolic rows": ("gemm", [TensorType(("m", 40), "float16"), TensorType((48, 40), "float16"),
                                       TensorType((48,), "float16")], {"trans_b": True},
                              lambda m: [_h(m, 40), _h(48, 40), _h(48)]),
    "batched, symbolic K, bf16": ("matmul", [TensorType((2, 9, "n"), "bfloat16"), TensorType((2, "n", 40), "bfloat16")],
                                  None, lambda n: [_h(2, 9, n, dtype="bfloat16"), _h(2, n, 40, dtype="bfloat16")]),
    "symbolic columns": ("matmul", [TensorType((9, 24), "float16"), TensorType((24, "n"), "float16")], None,
                         lambda n: [_h(9, 24), _h(24, n)]),
}


@pytest.mark.parametrize("case", SYMBOLIC)
def test_a_product_of_a_symbolic_size_on_tensor_cores_matches_numpy_at_each_size(case):
    """One kernel for every size: under a tile, past one (odd: 37) and, for K, several tiles (128:
    four iterations of the pipelined K loop) and none (0: zeros)."""
    name, types, attrs, inputs = SYMBOLIC[case]
    sizes = (0, 1, 37, 128) if "symbolic K" in case else (1, 37)
    check_op_sizes(name, types, attrs, [inputs(n) for n in sizes], 1e-2, 1e-2, targets=[ON_INTERPRETER])


@needs_nvrtc
@pytest.mark.parametrize("case", SYMBOLIC)
def test_a_product_of_a_symbolic_size_takes_tensor_cores_its_k_loop_pipelined(case):
    name, types, attrs, _ = SYMBOLIC[case]
    bound, outs = infer_types(name, types, attrs)
    s, args = node_kernel(name, types, bound, outs, target=Target("cuda"))
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.binary[:4] == b"\x7fELF"
    # mma.sync on swizzled tiles where their rows are a power of two bytes, else (and TF32) wmma
    assert ("wmma.mma.sync" if "tf32" in case else "mma.sync.aligned.m16n8k16") in f.source
    assert (f.grid is None) == ("symbolic K" not in case)  # (a grid over symbolic rows or columns: per launch)
    assert "cp.async.wait_group 0;" in f.source  # the next tiles copied while this one's products run
    # a padded tile's 16 bytes zero-filled past the operand's end, where its rows are whole vectors (24, 40)
    assert "cp.async.cg.shared.global [%0], [%1], 16, %2;" in f.source
    assert "__shared__" in f.source and "(n + 31) / 32 * 32]" not in f.source  # shared tiles of constant shapes
