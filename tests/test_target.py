"""The target is one object: named or given, it decides the code generator, the compiler and
flags, the SIMD width of the kernels and of the layout pass, the alignment and the tuning key,
and it holds the machine's facts (features, caches, cores)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember import target as target_module
from ember.graph import Graph, TensorType
from ember.intrinsics import cpu_has
from ember.lowering import LOWERED, lower_groups, partition
from ember.ops import infer_types
from ember.ops.nodes import add_op
from ember.schedules.apply import node_kernel
from ember.target import FEATURES, Target, as_target, machine_caches, machine_features
from ember.testing import random_array


def conv_graph() -> Graph:
    """Two 3x3 convolutions on 16 channels with a relu between: the layout pass blocks them."""
    g = Graph("conv")
    y = g.add_input("x", TensorType((1, 16, 8, 8)))
    for k in range(2):
        w = g.add_constant(random_array((16, 16, 3, 3)), f"w{k}")
        (y,) = add_op(g, "relu", add_op(g, "conv2d", [y, w], {"padding": (1, 1, 1, 1)}))
    g.set_outputs([y])
    return g


def test_targets_by_name_and_by_value():
    assert as_target("c") == Target() and as_target(Target()) == Target()
    assert Target().vector_bytes in (16, 32, 64) and Target().key.startswith("c | ")
    python = as_target("python")
    assert python.vector_bytes is None and python.lanes() == 1 and python.key == "python" and python.cc is None
    cuda = as_target("cuda")
    assert cuda.vector_bytes is None and cuda.lanes() == 1 and cuda.key.startswith("cuda | ") and cuda.cc is None
    assert as_target("c", cflags="-O1 -fopenmp -shared -fPIC").cflags == "-O1 -fopenmp -shared -fPIC"


def test_lanes_per_dtype():
    wide = Target(vector_bytes=64)
    dtypes = ("float32", "float16", "bfloat16", "int8", "float64", "int4")
    assert [wide.lanes(d) for d in dtypes] == [16, 32, 32, 64, 8, 64]  # int4: one value per byte
    assert Target(vector_bytes=32).lanes() == 8 and as_target("python").lanes("int8") == 1


def test_vector_registers_follow_the_features(monkeypatch):
    assert Target.x86("avx512").vector_registers == 32 and Target.x86("avx2").vector_registers == 16
    assert as_target("python").vector_registers == 0 and as_target("cuda").vector_registers == 0
    for features, registers in (({"neon"}, 32), ({"neon", "sve"}, 32), (set(), 16)):  # ARM; SSE only
        monkeypatch.setattr(target_module, "_features", lambda cc, cflags, f=frozenset(features): f)
        assert Target(vector_bytes=16).vector_registers == registers


def test_features_follow_the_flags_and_the_machine_governs_where_code_runs():
    host = Target()
    assert host.features <= set(FEATURES) and as_target("python").features == frozenset()
    machine = machine_features()
    if machine is not None:  # code for this machine uses nothing it lacks
        assert host.missing() == [] and host.features <= machine
    if "avx512f" in host.features:
        assert {"avx2", "fma", "avx512f"} <= host.features and host.vector_bytes == 64


def test_the_intrinsics_ask_the_same_reading_of_the_machine():
    machine = machine_features()
    if machine is None:
        pytest.skip("/proc/cpuinfo does not say")
    assert all(cpu_has(flag) == (name in machine) for name, (_, flag) in FEATURES.items())


def test_missing_features_are_refused_where_the_code_would_run(monkeypatch):
    monkeypatch.setattr(target_module, "machine_features", lambda: frozenset({"avx2", "fma"}))
    t = Target(cflags="-O2 -march=x86-64-v4 -fopenmp -shared -fPIC")
    if "avx512f" not in t.features:
        pytest.skip("the compiler does not target x86-64-v4")
    assert t.missing()[0].startswith("avx512")
    with pytest.raises(ember.ConfigError, match=r"uses avx512\w+.*which this machine .* lacks"):
        ember.compile(conv_graph(), target=t)
    assert Target.x86("avx2").missing() == []  # AVX2 and FMA: this (fake) machine has them


def test_cache_sizes_and_cores():
    l1, l2, l3 = Target().caches
    assert Target().caches == machine_caches() and 4096 <= l1 <= l2 <= l3 and Target().cores >= 1
    assert Target(caches=(1 << 15, 1 << 20, 1 << 25), cores=4).caches[2] == 1 << 25


def test_the_alignment_is_the_targets():
    g = conv_graph()
    cm = ember.compile(g, target=Target(align=128), opt_level=0)
    assert cm.plan.align == 128 and cm.spec.target["align"] == 128 and cm.plan.tensors
    assert all(o % 128 == 0 for o in cm.plan.layout().offsets)
    assert all(t.nbytes({}, 128) % 128 == 0 for t in cm.plan.tensors)
    assert all(w.ctypes.data % 128 == 0 for w in cm.weights.values())
    x = random_array((1, 16, 8, 8))
    want = ember.compile(g, opt_level=0)(x)
    for _ in range(2):  # the Python path, then the C one (ember.runtime.fastcall): both align the workspace
        np.testing.assert_allclose(cm(x), want, rtol=1e-5, atol=1e-5)


def test_bad_targets_are_config_errors():
    with pytest.raises(ember.ConfigError, match="unknown target 'metal'"):
        as_target("metal")
    with pytest.raises(ember.ConfigError, match="target 'cuda' has no C compiler"):
        as_target("cuda", cc="gcc")
    with pytest.raises(ember.ConfigError, match="cc and cflags are for target 'c'"):
        as_target("python", cc="gcc")
    with pytest.raises(ember.ConfigError, match="target must be one of"):
        as_target(3)
    with pytest.raises(ember.ConfigError, match="unknown x86 level 'avx9'"):
        Target.x86("avx9")
    with pytest.raises(ember.ConfigError, match="vector_bytes must be a power of two"):
        Target(vector_bytes=24)
    with pytest.raises(ember.ConfigError, match="align must be a power of two"):
        Target(align=48)
    with pytest.raises(ember.ScheduleError, match="schedule family 'tpu'"):
        ember.compile(conv_graph(), target=Target(schedules="tpu"))


def test_an_avx2_target_is_named_by_its_level():
    avx2 = Target.x86("avx2")
    assert "-march=x86-64-v3" in avx2.cflags and "-march=native" not in avx2.cflags
    assert avx2.vector_bytes == 32 and avx2.lanes() == 8 and {"avx2", "fma"} <= avx2.features
    assert not any(f.startswith(("avx512", "amx")) for f in avx2.features)
    assert avx2.key != Target().key or "avx512f" not in Target().features


def test_a_single_kernels_buffers_take_the_targets_alignment():
    target = Target(align=128)
    x, w = random_array((1, 8, 10, 10)), random_array((16, 8, 3, 3))
    in_types = [TensorType(x.shape), TensorType(w.shape)]
    attrs, out_types = infer_types("conv2d", in_types, {"padding": (1, 1, 1, 1)})
    s, args = node_kernel("conv2d", in_types, attrs, out_types, target=target)
    f = ember.build(s, args, target=target)
    assert "aligned_alloc(128, " in f.source and "aligned_alloc(64, " not in f.source  # padded input, packed weights
    assert "return (bytes + 127) / 128 * 128;" in f.source  # sizes a multiple of the alignment
    out = np.empty(out_types[0].shape, "float32")
    f(x, w, out)
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_a_kernel_lowered_for_one_width_is_never_reused_for_another():
    groups = partition(conv_graph(), 0).groups  # plain convolutions: their packed blocks are the lanes
    LOWERED.clear()
    narrow = lower_groups(groups, 1, target=Target(vector_bytes=32))
    wide = lower_groups(groups, 1, target=Target(vector_bytes=64))
    again = lower_groups(groups, 1, target=Target(vector_bytes=64))
    assert wide.reused == 0 and again.reused == again.lowered
    assert narrow.kernels[0] is not wide.kernels[0] and str(narrow.kernels[0]) != str(wide.kernels[0])


def test_the_layout_pass_blocks_channels_by_the_targets_width():
    def blocks(vector_bytes):  # the output channel block of each convolution's packed weights
        graph = partition(conv_graph(), 2, target=Target(vector_bytes=vector_bytes)).graph
        return {n.inputs[1].shape[-1] for n in graph.nodes if n.op == "conv2d_nchwc"}

    assert blocks(16) == {4} and blocks(32) == {8}


def test_a_compiled_model_is_built_for_its_target():
    g = conv_graph()
    x = random_array((1, 16, 8, 8))
    want = ember.compile(g, opt_level=0)(x)
    narrow = ember.compile(g, target=Target(vector_bytes=16))
    assert narrow.spec.target["vector_bytes"] == 16 and narrow.spec.target["target"] == "c"
    np.testing.assert_allclose(narrow(x), want, rtol=1e-4, atol=1e-4)


def test_a_gpu_targets_tuning_records_name_the_gpu():
    """Tuning records of one GPU are not another's: the key names the GPU and its architecture,
    and a simulated GPU (the interpreter's times) has a key of its own."""
    assert Target("cuda", simulate=True).key == "cuda | simulated | sm_90"
    assert Target("cuda").key.count(" | ") == 2
