"""The GPU's facts in the Target (ember.target.GPU): the device's multiprocessors, shared memory
and threads a block, read from the driver where there is a device (here the stand-in's), the
defaults (an H100's or H200's 132 SMs) where there is none; the products' tiles and split-K follow
the target's count, the count is part of the target, so of every key built from it, and a kernel
is checked against the target's block limits."""

import numpy as np
import pytest
from gpu_kernels import needs_nvrtc
from stand_in_driver import install

import ember
from ember.cuda import tensorcore
from ember.errors import ScheduleError
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.ops.registry import infer_types
from ember.passes.split_k import split_k
from ember.schedules.apply import node_kernel
from ember.target import GPU, Target

FEW = GPU(multiprocessors=16)


def test_the_target_reads_the_devices_facts_and_defaults_without_one(monkeypatch):
    assert Target("cuda", simulate=True).gpu == GPU() == GPU(132, 48 * 1024, 1024)
    assert Target("python", schedules="gpu").gpu == GPU() and Target("c").gpu is None
    install(monkeypatch, multiprocessors=16)
    on_device = Target("cuda")
    assert on_device.gpu == FEW
    assert on_device != Target("cuda", gpu=GPU()) and repr(FEW) in repr(on_device)  # (the build keys differ)
    assert on_device.describe()["gpu"] == {"multiprocessors": 16, "shared_per_block": 48 * 1024,
                                           "threads_per_block": 1024}


def _bert_layer_kernel(target):
    types = [TensorType((128, 768)), TensorType((768, 768)), TensorType((768,))]
    bound, outs = infer_types("gemm", types, {"trans_b": True})
    s, args = node_kernel("gemm", types, bound, outs, target=target)
    return ember.build(s, args, target="cuda", arch="sm_90")


@needs_nvrtc
def test_the_tiles_fill_the_targets_multiprocessors():
    assert _bert_layer_kernel(Target("cuda", gpu=GPU())).grid == (24, 4, 1)  # 32 x 32 tiles: 96 blocks of 132 SMs
    assert _bert_layer_kernel(Target("cuda", gpu=FEW)).grid == (12, 2, 1)  # 64 x 64: 24 blocks fill 16


def test_split_k_splits_for_the_targets_multiprocessors():
    g = Graph()
    x = g.add_input("x", TensorType((128, 768)))
    y, = add_op(g, "gemm", [x, g.add_constant(np.ones((768, 768), "float32"), "w")], {"trans_b": True})
    g.set_outputs([y])
    assert [n.op for n in split_k(g, Target("cuda", gpu=GPU())).nodes] == ["gemm_partials", "sum_partials"]
    assert [n.op for n in split_k(g, Target("cuda", gpu=FEW)).nodes] == ["gemm"]  # 24 blocks of 64 x 64 fill 16 SMs


@needs_nvrtc
def test_a_kernel_is_checked_against_the_targets_block_limits():
    s, args = tensorcore.tensorcore_gemm(128, 128, 64, "float16", BM=64, BN=64, WM=32, WN=32)
    small = Target("cuda", gpu=GPU(shared_per_block=8 * 1024))
    with pytest.raises(ScheduleError, match="past the limit of 8192 bytes of static shared memory per block"):
        ember.build(s, args, target=small, arch="sm_90")
