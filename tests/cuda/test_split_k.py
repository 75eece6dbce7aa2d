"""Split-K (ember.passes.split_k, ember.ops.gemm_partials, ember.schedules.gpu.split_k): a float32
linear layer, or a half convolution as an implicit GEMM, whose tiles leave multiprocessors idle
computed as partial sums over parts of K (a kernel), then their sum in a fixed order with the
layer's epilogue (a second kernel); the operators on the interpreter with GPU semantics against
NumPy, models on the simulated GPU against NumPy and torch, the partials built by NVRTC for sm_90,
and the number of parts for BERT-base's layers at 128 tokens and ResNet-18's deep convolutions."""

import math

import numpy as np
import torch
from gpu_kernels import needs_nvrtc

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.ops.registry import infer_types
from ember.passes.split_k import split_k
from ember.schedules.apply import node_kernel
from ember.schedules.gpu.split_k import splits_for
from ember.target import Target
from ember.testing import check_op, random_array

RNG = np.random.default_rng(43)
ON_INTERPRETER = Target("python", schedules="gpu")


def _x(*shape):
    return random_array(shape, "float32", RNG)


def test_partial_sums_and_their_sum_match_numpy_on_the_interpreter():
    check_op("gemm_partials", [_x(20, 96), _x(3, 24, 32)], None, rtol=1e-5, atol=1e-5,
             targets=[ON_INTERPRETER])  # tiles past M and N: padded and guarded
    check_op("sum_partials", [_x(3, 5, 7)], None, rtol=1e-6, atol=1e-6, targets=[ON_INTERPRETER])
    check_op("sum_partials", [_x(2, 1, 3, 4, 5)], None, rtol=1e-6, atol=1e-6, targets=[ON_INTERPRETER])


def test_a_convolutions_partial_sums_match_numpy_on_tensor_cores_on_the_interpreter():
    x, w = random_array((1, 8, 5, 5), "float16", RNG), random_array((2, 1, 6, 36), "float16", RNG)
    check_op("conv2d_gemm_partials", [x, w], {"kernel": (3, 3), "padding": (1, 1, 1, 1)}, rtol=1e-2, atol=1e-2,
             targets=[ON_INTERPRETER])  # the taps of 8 channels in two parts of 36, each padded to a tile of k


class _Residual(torch.nn.Module):
    """A 3x3 convolution of 64 channels into 8 at 4x4 (K = 576: one tile of 16 x 16, split in two
    parts of 288 on a GPU of 132 SMs), its bias, a residual and a ReLU."""

    def __init__(self):
        super().__init__()
        self.conv, self.skip = torch.nn.Conv2d(64, 8, 3, padding=1), torch.nn.Conv2d(64, 8, 1)

    def forward(self, x):
        return torch.relu(self.conv(x) + self.skip(x))


def test_a_half_convolution_that_leaves_the_gpu_idle_is_split_its_epilogue_after_the_sum():
    torch.manual_seed(8)
    model, x = _Residual().eval(), torch.randn(1, 64, 4, 4)
    cm = ember.compile(model, (x,), target=Target("cuda", simulate=True), precision="fp16")
    ops = [k.ops for k in cm.kernels]
    # channels-last (ember.passes.channels_last); the 1x1's K of 64: one pass
    assert ("conv2d_nhwc_gemm_partials",) in ops and ("conv2d_nhwc_gemm",) in ops
    assert ("sum_partials", "add", "cast", "add", "relu", "cast") in ops  # bias, cast, residual, ReLU fused
    with torch.no_grad():
        ref = model(x).numpy()
    assert np.linalg.norm(cm(x.numpy()) - ref) / np.linalg.norm(ref) <= 1e-2


def test_a_linear_layer_that_leaves_the_gpu_idle_is_split_its_gelu_after_the_sum():
    w, b = _x(512, 16), _x(16)  # (K, N): one 16 x 16 tile; K in two parts of 256
    g = Graph()
    x = g.add_input("x", TensorType((4, 512)))
    h, = add_op(g, "gemm", [x, g.add_constant(w, "w"), g.add_constant(b, "b")])
    h, = add_op(g, "gelu", [h])
    g.set_outputs([h])
    cm = ember.compile(g, target=Target("cuda", simulate=True))
    assert [set(k.ops) for k in cm.kernels] == [{"gemm_partials"}, {"sum_partials", "add", "gelu"}]
    x = _x(4, 512)
    y = x.astype("float64") @ w + b
    np.testing.assert_allclose(cm(x), 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2))), rtol=1e-5, atol=1e-5)


def test_a_half_linear_layer_is_split_on_tensor_cores_its_bias_and_gelu_after_the_sum():
    w, b = _x(512, 16), _x(16)
    g = Graph()
    x = g.add_input("x", TensorType((4, 512)))
    h, = add_op(g, "gemm", [x, g.add_constant(w, "w"), g.add_constant(b, "b")])
    h, = add_op(g, "gelu", [h])
    g.set_outputs([h])
    cm = ember.compile(g, target=Target("cuda", simulate=True), precision="fp16")
    assert ("gemm_partials",) in [k.ops for k in cm.kernels]
    assert any(k.ops[:3] == ("sum_partials", "add", "cast") and "gelu" in k.ops for k in cm.kernels)
    x = _x(4, 512)
    y = x.astype("float64") @ w + b
    ref = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    assert np.linalg.norm(cm(x) - ref) / np.linalg.norm(ref) <= 1e-2


def test_a_half_layer_of_one_row_is_left_to_the_gpus_gemv():
    def ops(rows):
        g = Graph()
        y, = add_op(g, "gemm", [g.add_input("x", TensorType((rows, 512), "float16")),
                                g.add_constant(_x(512, 16).astype("float16"), "w")])
        g.set_outputs([y])
        return [n.op for n in split_k(g, Target("cuda")).nodes]

    assert ops(1) == ["gemm"] and ops(4) == ["gemm_partials", "sum_partials", "cast"]


def _layer(**attrs):
    """A graph of one linear layer of BERT-base at 128 tokens, its output the gemm's."""
    g = Graph()
    y, = add_op(g, "gemm", [g.add_input("x", TensorType((128, 768))), g.add_constant(_x(768, 768), "w"),
                            g.add_constant(_x(768), "b")], {"trans_b": True, **attrs})
    g.set_outputs([y])
    return g


def test_the_pass_rewrites_only_for_a_target_that_splits_and_keeps_the_output_name():
    g = _layer()
    split = split_k(g, Target("cuda"))
    assert [n.op for n in split.nodes] == ["gemm_partials", "sum_partials", "add"]
    assert split.outputs[0].name == g.outputs[0].name
    parts = split.constants[split.nodes[0].inputs[1].name]  # (2, N, K/2): W's columns in two parts
    np.testing.assert_array_equal(parts[1], g.constants["w"][:, 384:])
    assert split_k(g, Target("c")) is g and split_k(g) is g  # (no k_splits: nothing to do)
    tf32 = _layer(tf32=True)
    assert [n.op for n in split_k(tf32, Target("cuda")).nodes] == ["gemm"]  # (Tensor Cores take it)


def test_parts_fill_the_gpu_only_where_k_is_long_enough():
    assert splits_for(1, 128, 768, 768) == 2  # BERT-base's attention projections: 96 blocks of 32 x 32 -> 192
    assert splits_for(1, 128, 768, 3072) == 2  # its MLP down
    assert splits_for(1, 128, 3072, 768) == 1  # its MLP up: 192 blocks already
    assert splits_for(1, 128, 768, 384) == 1  # parts of 192: too short
    assert splits_for(1, 16, 64, 4096) == 16  # 2 blocks of 16 x 32: as many parts of 256 as K holds
    assert splits_for(1, 4, 4, 1024) == 1  # 16 Ki multiply-adds: launch-bound whatever its grid
    assert splits_for(1, 256, 14 * 14, 256 * 9) == 3  # ResNet-18's 3x3 convolutions at 14x14: 56 blocks -> 168
    assert splits_for(1, 512, 7 * 7, 512 * 9) == 6  # at 7x7: 32 blocks -> 192, parts of 768


@needs_nvrtc
def test_bert_base_layer_partials_compile_for_sm90():
    types = [TensorType((128, 768)), TensorType((2, 768, 384))]
    bound, outs = infer_types("gemm_partials", types, {})
    s, args = node_kernel("gemm_partials", types, bound, outs, target=Target("cuda"))
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.grid == (24, 4, 2) and f.block == (16, 16, 1)  # 192 blocks: every multiprocessor busy
    assert "cp.async.cg.shared.global [%0], [%1], 16;" in f.source  # x's parts copied in place, 16 bytes at a time


@needs_nvrtc
def test_resnet18_last_convolutions_partials_compile_for_sm90():
    types = [TensorType((1, 512, 7, 7), "float16"), TensorType((6, 1, 512, 768), "float16")]
    bound, outs = infer_types("conv2d_gemm_partials", types, {"kernel": (3, 3), "padding": (1, 1, 1, 1)})
    s, args = node_kernel("conv2d_gemm_partials", types, bound, outs, target=Target("cuda"))
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.grid == (2, 16, 6) and f.block == (32, 2, 1)  # 192 blocks of 32 x 32 where one pass had 32
