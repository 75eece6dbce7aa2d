"""float32 products on CUDA cores at any shape (ember.schedules.gpu.matmul, ember.cuda.schedules.
cuda_core_product): shared-memory tiles, a register tile of sums per thread from which it computes
its outputs, the epilogue included; linear layers with their weights read in place, batched
matmul, M, N and K that the tiles do not divide (padded with zeros); each on the interpreter with
GPU semantics against NumPy, compiled by NVRTC for sm_90, and a transformer's MLP at reduced size
against torch. Symbolic M, N or K are tiled too, each checked at sizes below one tile and past
it (not multiples of the tiles)."""

import math

import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.ops.registry import infer_types
from ember.schedules.apply import node_kernel
from ember.schedules.gpu.matmul import SMS, block_tiles, cuda_core_tiles
from ember.target import Target
from ember.testing import check_op, check_op_sizes, random_array

RNG = np.random.default_rng(41)
ON_INTERPRETER = Target("python", schedules="gpu")


def _x(*shape):
    return random_array(shape, "float32", RNG)


CASES = {  # name: (operator, inputs, attributes)
    "odd shape": ("matmul", lambda: [_x(37, 29), _x(29, 50)], {}),
    "batched": ("matmul", lambda: [_x(2, 13, 64), _x(2, 64, 48)], {}),
    "broadcast batch": ("matmul", lambda: [_x(2, 3, 9, 24), _x(1, 24, 40)], {}),  # one batch axis a loop in the block
    "linear, partial tiles": ("gemm", lambda: [_x(37, 29), _x(50, 29), _x(50)], {"trans_b": True}),
}


@pytest.mark.parametrize("case", CASES)
def test_a_float32_product_matches_numpy_on_the_interpreter(case):
    name, inputs, attrs = CASES[case]
    check_op(name, inputs(), attrs, rtol=1e-4, atol=1e-4, targets=[ON_INTERPRETER])


@needs_nvrtc
@pytest.mark.parametrize("case", CASES)
def test_a_float32_product_compiles_for_sm90_in_register_tiles(case):
    name, inputs, attrs = CASES[case]
    types = [TensorType(x.shape, x.dtype.name) for x in inputs()]
    bound, outs = infer_types(name, types, attrs)
    s, args = node_kernel(name, types, bound, outs, target=Target("cuda"))
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.binary[:4] == b"\x7fELF" and "__shared__" in f.source and "wmma" not in f.source
    assert f.block == (16, 16, 1) and len(args) == len(types) + 1  # the weights read in place: no copy of them
    # the padded tiles copied asynchronously too, zeros where a row or column is past the operand's end
    zero_filled = {"odd shape": "cp.async.ca.shared.global [%0], [%1], 4, %2;",  # (rows of 29: an element a copy)
                   "batched": "cp.async.cg.shared.global [%0], [%1], 16, %2;"}  # (13 rows of 64: 16 bytes a copy)
    assert zero_filled.get(case, "") in f.source


SYMBOLIC = {  # name: (operator, input types, attributes, the inputs at a size)
    "rows": ("gemm", [TensorType(("m", 29)), TensorType((50, 29)), TensorType((50,))], {"trans_b": True},
             lambda m: [_x(m, 29), _x(50, 29), _x(50)]),
    "reduction": ("matmul", [TensorType((2, 9, "n")), TensorType((2, "n", 40))], None,
                  lambda n: [_x(2, 9, n), _x(2, n, 40)]),
    "columns": ("matmul", [TensorType((2, 9, 24)), TensorType((2, 24, "n"))], None,
                lambda n: [_x(2, 9, 24), _x(2, 24, n)]),
}


@pytest.mark.parametrize("case", SYMBOLIC)
def test_a_product_of_a_symbolic_size_matches_numpy_at_each_size(case):
    name, types, attrs, inputs = SYMBOLIC[case]
    check_op_sizes(name, types, attrs, [inputs(n) for n in (1, 37)], 1e-4, 1e-4, targets=[ON_INTERPRETER])


@needs_nvrtc
def test_a_linear_layer_of_symbolic_rows_is_tiled_its_grid_computed_per_launch():
    types = [TensorType(("tokens", 768)), TensorType((768, 768)), TensorType((768,))]
    bound, outs = infer_types("gemm", types, {"trans_b": True})
    s, args = node_kernel("gemm", types, bound, outs, target=Target("cuda"))
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.block == (16, 16, 1) and f.grid is None and "int64_t tokens" in f.source
    assert f.grid_of([128]) == (24, 4, 1) and f.grid_of([300]) == (24, 10, 1) and f.grid_of([1]) == (24, 1, 1)
    assert "cp.async.cg.shared.global [%0], [%1], 16, %2;" in f.source  # rows past the size: zeros


@needs_nvrtc
def test_a_symbolic_k_loop_is_pipelined():
    name, types, attrs, _ = SYMBOLIC["reduction"]
    bound, outs = infer_types(name, types, attrs)
    s, args = node_kernel(name, types, bound, outs, target=Target("cuda"))
    src = ember.build(s, args, target="cuda", arch="sm_90").source
    # the first panels copied before the loop (which runs at least once), the next ones while this one's products run
    assert "for (int64_t k_0 = 0; k_0 < (ember_max_int64(n, 1) + 15) / 16; ++k_0) {" in src  # (K = 0: a tile of zeros)
    assert "if (k_0 + 1 < (ember_max_int64(n, 1) + 15) / 16) {" in src
    assert "cp.async.wait_group 0;" in src


@needs_nvrtc
def test_a_linear_layer_of_bert_base_compiles_with_its_panels_copied_asynchronously():
    types = [TensorType((128, 768), "float32"), TensorType((768, 768), "float32"), TensorType((768,), "float32")]
    bound, outs = infer_types("gemm", types, {"trans_b": True})
    s, args = node_kernel("gemm", types, bound, outs, target=Target("cuda"))
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.grid == (24, 4, 1) and f.block == (16, 16, 1)  # 32 x 32 tiles: 96 blocks
    # the next panels copied while this one's products run: the activations' 16 bytes at a time, the
    # weights' (read in place, along k) an element at a time
    assert "cp.async.cg.shared.global [%0], [%1], 16;" in f.source
    assert "cp.async.ca.shared.global [%0], [%1], 4;" in f.source


def test_tiles_follow_the_shape_until_the_grid_fills_the_gpu():
    assert block_tiles(1, 4096, 4096) == (64, 64)
    BM, BN = block_tiles(1, 128, 768)  # BERT-base's attention projections at 128 tokens, batch 1
    assert (BM, BN) == (32, 32) and 128 // BM * 768 // BN < SMS  # (no smaller tiles: 96 blocks)
    assert cuda_core_tiles(1, 128, 3072) == {"BM": 64, "BN": 32, "BK": 16, "TM": 4, "TN": 2}  # its MLP up


def _mlp(d=32, tokens=24):
    """A transformer's MLP with its residual, x + (gelu(x W1^T + b1) W2^T + b2): BERT-base's shape
    at reduced size, and its NumPy reference."""
    w1, b1, w2, b2 = _x(4 * d, d), _x(4 * d), _x(d, 4 * d), _x(d)
    g = Graph()
    x = g.add_input("x", TensorType((tokens, d)))
    h, = add_op(g, "gemm", [x, g.add_constant(w1, "w1"), g.add_constant(b1, "b1")], {"trans_b": True})
    h, = add_op(g, "gelu", [h])
    y, = add_op(g, "gemm", [h, g.add_constant(w2, "w2"), g.add_constant(b2, "b2")], {"trans_b": True})
    y, = add_op(g, "add", [x, y])
    g.set_outputs([y])

    def reference(x):
        h = x @ w1.T + b1
        h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
        return x + h @ w2.T + b2

    return g, reference


@needs_nvrtc
def test_linear_layers_compute_their_epilogues_from_the_register_tiles():
    g, reference = _mlp()
    cm = ember.compile(g, target=Target("cuda", simulate=True))
    assert [set(k.ops) for k in cm.kernels] == [{"gemm", "gelu"}, {"gemm", "add"}]  # the epilogues fused
    # each thread's 2 x 2 sums in registers, the GELU (of the sum plus the bias) computed from them
    assert cm.source.count("float matmul_pad[4];") == 2 and "erff((matmul_pad[" in cm.source
    x = _x(24, 32)
    np.testing.assert_allclose(cm(x), reference(x.astype("float64")), rtol=1e-4, atol=1e-4)
