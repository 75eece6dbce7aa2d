"""The GPU's facts in the Target (ember.target.GPU): the device's architecture, multiprocessors,
shared memory, threads and registers a block, read from the driver where there is a device (here
the stand-in's), else its architecture's row of the table (ARCHS, the CUDA Programming Guide's
figures; by default sm_90's, an H100's or H200's 132 SMs); the products' tiles and split-K follow
the target's count, the count is part of the target, so of every key built from it, a kernel (a
tile kernel's shared blocks included) is checked against the target's block limits, and flash
attention sizes its tiles to the shared memory the target's blocks may opt in to."""

import numpy as np
import pytest
from gpu_kernels import elementwise, needs_nvrtc
from stand_in_driver import install

import ember
import ember.triton as triton
import ember.triton.language as tl
from ember.cuda import tensorcore
from ember.cuda.limits import limits_for
from ember.errors import ConfigError, ScheduleError
from ember.graph import Graph, TensorType
from ember.ops import flash_attention_mma as mma
from ember.ops.nodes import add_op
from ember.ops.registry import infer_types
from ember.passes.split_k import split_k
from ember.schedules.apply import compute_node, node_kernel
from ember.target import GPU, Target
from ember.tir.functor import visit_stmt
from ember.tir.stmt import Allocate

FEW = GPU(multiprocessors=16)


def test_the_target_reads_the_devices_facts_and_defaults_without_one(monkeypatch):
    assert Target("cuda", simulate=True).gpu == GPU() == GPU(132, 48 * 1024, 1024)
    assert Target("python", schedules="gpu").gpu == GPU() and Target("c").gpu is None
    install(monkeypatch, multiprocessors=16)
    on_device = Target("cuda")
    assert on_device.gpu == FEW
    assert on_device != Target("cuda", gpu=GPU()) and repr(FEW) in repr(on_device)  # (the build keys differ)
    assert on_device.describe()["gpu"] == {"multiprocessors": 16, "shared_per_block": 48 * 1024,
                                           "threads_per_block": 1024, "shared_opt_in": 227 * 1024,
                                           "registers_per_block": 64 * 1024, "arch": "sm_90"}


def test_an_architectures_facts_are_the_programming_guides():
    """"Technical Specifications per Compute Capability" (CUDA C++ Programming Guide, CUDA 12):
    8.0 and 8.9 have 1024 threads, 64 K 32-bit registers and 48 KB of static shared memory a
    block; a block may opt in to 163 KB on 8.0 (an A100: 108 SMs), 99 KB on 8.9 (an L4: 58)."""
    assert GPU.of("sm_80") == GPU(108, 48 * 1024, 1024, 163 * 1024, 64 * 1024, "sm_80")
    assert GPU.of("sm_89") == GPU(58, 48 * 1024, 1024, 99 * 1024, 64 * 1024, "sm_89")
    assert GPU.of("compute_90") == GPU.of("sm_90a") == GPU()  # PTX for, and the arch-specific, sm_90
    assert GPU.of("sm_80", multiprocessors=8) == GPU(8, 48 * 1024, 1024, 163 * 1024, 64 * 1024, "sm_80")
    assert limits_for("sm_80", GPU()) == GPU.of("sm_80")  # (the target's GPU is another architecture)
    with pytest.raises(ConfigError, match="no facts of GPU architecture 'sm_100' without its device"):
        GPU.of("sm_100")


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


@needs_nvrtc
def test_a_kernel_compiles_for_the_targets_architecture():
    s, args, _ = elementwise(256)
    assert ember.build(s, args, target=Target("cuda", gpu=GPU.of("sm_80"))).arch == "sm_80"  # (no device here)
    assert Target("cuda", simulate=True, gpu=GPU.of("sm_80")).key == "cuda | simulated | sm_80"


def test_a_dynamic_shared_kernel_is_checked_against_the_targets_opt_in():
    s, args = tensorcore.tensorcore_gemm(256, 256, 128, BN=256)  # 72 KiB of dynamic shared memory
    with pytest.raises(ScheduleError, match=r"past the limit of 65536 bytes of dynamic shared memory a block may opt "
                                            r"in to \(sm_75\)"):
        ember.build(s, args, target=Target("cuda", gpu=GPU.of("sm_75")), arch="sm_75")


@triton.jit
def _shared_blocks(x_ptr, out_ptr, R: tl.constexpr, W: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * R + tl.arange(0, R)[None, :]
    x, y, z = tl.load(x_ptr + offs) * 2, tl.load(x_ptr + offs) * 3, tl.load(x_ptr + offs) * 4  # each read
    # transposed too: kept in shared memory
    w = tl.load(x_ptr + tl.arange(0, R)[:, None] * W + tl.arange(0, W)[None, :])
    tl.store(out_ptr + offs, x + tl.trans(x) + y + tl.trans(y) + z + tl.trans(z) + tl.sum(tl.trans(w), axis=0)[:, None])


@needs_nvrtc
def test_a_tile_kernels_shared_blocks_fit_the_targets_gpu():
    x = np.ones((128, 128), np.float32)  # three 128 x 128 float32 blocks and a 128 x 16: 200.5 KiB
    source = _shared_blocks.compile(x, x, R=128, W=16, target=Target("cuda", gpu=GPU())).source
    assert "dynamic shared memory 205312 bytes" in source  # within sm_90's 227 KiB
    with pytest.raises(ScheduleError, match="205312 bytes of blocks in shared memory .*: past the 166912 bytes a block "
                                            "may have on sm_80"):
        _shared_blocks.compile(x, x, R=128, W=16, target=Target("cuda", gpu=GPU.of("sm_80")))


def _key_tile(target: Target) -> int:
    """The elements of the k tile of flash attention's kernel of head size 128 in float16 on `target`."""
    types = [TensorType((1, 2, 64, 128), "float16")] * 3
    bound, outs = infer_types("flash_attention", types, {})
    _, (out,) = compute_node("flash_attention", types, bound, outs, target=target)
    found = []
    visit_stmt(out.op.body, lambda s: found.append(s.buffer) if isinstance(s, Allocate) else None)
    return next(b.shape[0].value for b in found if b.name == "k_tile")


def test_flash_attention_sizes_its_tiles_to_the_targets_opt_in_shared_memory():
    assert mma.config("float16", 64, 64, 0) == (4, 64, False)  # 45 KiB: static shared memory on any GPU
    assert mma.config("float16", 128, 128, GPU().shared_opt_in) == (4, 64, True)  # 85 KiB
    assert mma.config("float16", 128, 128, GPU.of("sm_75").shared_opt_in) == (4, 32, True)  # 51 KiB of 64
    assert mma.config("float16", 128, 128, 48 * 1024) is None
    assert _key_tile(Target("cuda", simulate=True)) == 64 * 136  # (rows padded by 8 halves)
    assert _key_tile(Target("cuda", simulate=True, gpu=GPU.of("sm_80", shared_opt_in=64 * 1024))) == 32 * 136
    with pytest.raises(ScheduleError, match="flash_attention is a GPU kernel: target 'c' has no GPU"):
        _key_tile(Target("c"))
