"""The GPU's scans (ember.schedules.gpu.scan: cumsum and cumprod, a row a block scanned in chunks
in shared memory, or a thread a column): on the interpreter with GPU semantics against the
operators' NumPy references, inclusive and exclusive, forward and reverse, rows longer than a
chunk and of symbolic length, and compiled by NVRTC for sm_90; on a GPU where one is lent."""

import numpy as np
import pytest
from gpu_kernels import needs_gpu, needs_nvrtc

import ember
from ember.graph.core import TensorType
from ember.ops.registry import infer_types
from ember.schedules.apply import node_kernel
from ember.target import Target
from ember.testing import check_op, check_op_sizes, random_array

RNG = np.random.default_rng(31)
ON_INTERPRETER = Target("python", schedules="gpu")


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("exclusive, reverse", [(False, False), (True, True)])
def test_a_row_longer_than_a_chunk_carries_its_running_total(op, exclusive, reverse):
    x = random_array((2, 300), "float32", RNG)  # 256 + 44: two chunks, the second's tail guarded
    if op == "cumprod":
        x = (1 + x / 100).astype("float32")  # (products of 300 factors near 1: no overflow, no underflow)
    check_op(op, [x], {"axis": 1, "exclusive": exclusive, "reverse": reverse}, rtol=1e-4, atol=1e-4,
             targets=[ON_INTERPRETER])


def test_a_symbolic_length_of_integers_scans_at_each_size():
    # GPT-2's position ids: a cumsum of int64 over the tokens
    sets = [[random_array((2, n), "int64", RNG)] for n in (3, 33)]
    check_op_sizes("cumsum", [TensorType((2, "tokens"), "int64")], {"axis": 1}, sets, rtol=0, atol=0,
                   targets=[ON_INTERPRETER])


def test_a_scan_along_another_axis_walks_each_column_in_fp32():
    x = random_array((3, 7, 5), "float16", RNG)
    out = check_op("cumsum", [x], {"axis": 1, "reverse": True}, rtol=2e-3, atol=2e-3, targets=[ON_INTERPRETER])[0]
    assert out.dtype == np.float16


@needs_nvrtc
@pytest.mark.parametrize("shape, axis, shows", [((2, "n"), 1, "__syncthreads"), ((4, 9, 3), 1, "threadIdx.x")])
def test_the_scans_compile_for_sm90(shape, axis, shows):
    types = [TensorType(shape, "float32")]
    bound, outs = infer_types("cumsum", types, {"axis": axis, "exclusive": True})
    s, args = node_kernel("cumsum", types, bound, outs, target=Target("cuda"))
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.binary[:4] == b"\x7fELF" and shows in f.source


def test_the_gpu_family_writes_the_scans_and_the_cpu_takes_the_operators_compute():
    from ember.ops.registry import get
    from ember.schedules import cpu, gpu

    for op in ("cumsum", "cumprod"):
        assert gpu.compute_for(get(op)) is not get(op).compute and cpu.compute_for(get(op)) is get(op).compute
    with pytest.raises(ValueError, match="'cumsum' has two computes in ember.schedules.gpu"):
        gpu.computes("cumsum")(lambda inputs, attrs, out_types: None)


@needs_gpu
@pytest.mark.parametrize("op, shape, axis", [("cumsum", (4, 1000), 1), ("cumprod", (4, 1000), 1),
                                             ("cumsum", (5, 300, 3), 1)])
def test_the_scans_on_the_gpu(op, shape, axis):
    x = random_array(shape, "float32", RNG)
    if op == "cumprod":
        x = (1 + x / 1000).astype("float32")
    for exclusive, reverse in ((False, False), (True, True)):
        check_op(op, [x], {"axis": axis, "exclusive": exclusive, "reverse": reverse}, rtol=1e-4, atol=1e-4,
                 targets=["cuda"])
