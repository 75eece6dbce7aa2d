"""The GPU's row kernels (ember.schedules.gpu.rows: softmax, log_softmax, layer_norm, rms_norm a
row a block): their numbers on the interpreter with GPU semantics (races checked) at odd row
lengths, several leading axes and a symbolic number of rows; the row read from global memory once,
kept in registers where every phase reads only its thread's columns (ember.cuda.private), else in
shared memory; NVRTC builds for sm_90."""

import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

import ember
from ember.cuda import schedules as gpu
from ember.cuda import workloads
from ember.errors import ScheduleError
from ember.graph.core import TensorType
from ember.ops.registry import get, infer_types
from ember.schedules.apply import node_kernel
from ember.schedules.gpu.rows import row_blocks
from ember.target import Target
from ember.testing import check_op, check_op_sizes, random_array

RNG = np.random.default_rng(24)
ON_INTERPRETER = Target("python", schedules="gpu")
OPS = {"softmax": (lambda m: [], {"axis": -1}),
       "log_softmax": (lambda m: [], {"axis": -1}),
       "layer_norm": (lambda m: [(m,), (m,)], {"normalized_ndim": 1, "eps": 1e-5}),
       "rms_norm": (lambda m: [(m,)], {"normalized_ndim": 1, "eps": 1e-6})}


def _inputs(op, shape):
    params, attrs = OPS[op]
    x = random_array(shape, "float32", RNG) * 3 + 1
    return [x, *(random_array(p, "float32", RNG) for p in params(shape[-1]))], attrs


@pytest.mark.parametrize("shape", [(1, 5), (2, 768), (2, 1000), (2, 3, 64)],
                         ids=["1x5", "2x768", "2x1000 (a guarded tail)", "2x3x64"])
@pytest.mark.parametrize("op", OPS)
def test_row_kernels_match_numpy_on_the_interpreter(op, shape):
    inputs, attrs = _inputs(op, shape)
    check_op(op, inputs, attrs, rtol=1e-4, atol=1e-5, targets=[ON_INTERPRETER])


def test_a_symbolic_number_of_rows_takes_the_row_kernel():
    # a transformer over symbolic tokens: rows of a constant length, one kernel at every count
    sets = [_inputs("layer_norm", (rows, 96))[0] for rows in (3, 1)]
    types = [TensorType(("tokens", 96)), TensorType((96,)), TensorType((96,))]
    check_op_sizes("layer_norm", types, OPS["layer_norm"][1], sets, rtol=1e-4, atol=1e-5, targets=[ON_INTERPRETER])


def test_a_row_of_symbolic_length_is_read_in_chunks_of_the_blocks_threads():
    # attention's softmax over a cache of symbolic length: each phase loops over the row, its tail guarded
    sets = [_inputs("softmax", (1, length))[0] for length in (300, 7)]
    check_op_sizes("softmax", [TensorType((1, "length"))], OPS["softmax"][1], sets, rtol=1e-5, atol=1e-6,
                   targets=[ON_INTERPRETER])


def _source(op, shape):
    params, attrs = OPS[op]
    types = [TensorType(shape), *(TensorType(p) for p in params(shape[-1]))]
    bound, outs = infer_types(op, types, attrs)
    s, args = node_kernel(op, types, bound, outs, target=Target("cuda"))
    return ember.build(s, args, target="cuda", arch="sm_90")


@needs_nvrtc
def test_a_softmax_row_is_read_once_into_registers():
    f = _source("softmax", ("rows", 4096))
    assert f.block == (256, 1, 1)
    assert "float in0_local[16];" in f.source and "__shared__ __align__(16) float in0_" not in f.source
    assert f.source.count("const float4*>(&in0[") == 4 == f.source.count("in0[")  # 16 bytes at a time, once
    assert f.source.count("__syncthreads();") == 2  # one exchange of partials per statistic
    # exp(x - max) once per element, kept in registers for the sum and the output
    assert "float ex_local[16];" in f.source and f.source.count("expf(") == 4  # (4 loops of 4 lanes)


@needs_nvrtc
def test_a_layer_norms_row_in_registers_its_first_element_read_once_a_row():
    # the mean starts from the row's first element, which only thread 0 holds: a value of the row,
    # every thread's, read from global memory before any output is stored
    f = _source("layer_norm", (8, 768))
    assert f.block == (96, 1, 1) and "float in0_local[8];" in f.source and "in0_shared" not in f.source
    assert "first[0] = in0[i0 * 768];" in f.source
    assert f.source.count("in0[") == 3 and f.source.count("const float4*>(&in0[") == 2  # its two vectors of 4


def _check_variant(op, shape, **options):
    """op's kernel scheduled by rows.row_blocks with `options` on the interpreter, against NumPy."""
    inputs, attrs = _inputs(op, shape)
    types = [TensorType(x.shape, "float32") for x in inputs]
    bound, outs = infer_types(op, types, attrs)
    s, args = node_kernel(op, types, bound, outs, schedule=False, target=ON_INTERPRETER)
    assert row_blocks(s, args[-1], ON_INTERPRETER, **options)
    y = np.full(shape, np.nan, "float32")
    ember.build(s, args, target=ON_INTERPRETER)(*inputs, y)
    np.testing.assert_allclose(y, get(op).reference(inputs, bound)[0], rtol=1e-4, atol=1e-5)


def test_a_row_staged_in_shared_memory_matches_numpy():
    # where the row does not fit a thread's registers (more than rows.HELD elements a thread)
    _check_variant("layer_norm", (3, 200), threads=32, scope="shared")


def test_registers_refuse_a_stage_that_reads_another_threads_column():
    w = workloads.layer_norm(4, 64)
    first = ember.te.compute((4,), lambda i: w.A[i, 0], name="first")  # the row's first element: thread 0's
    out = ember.te.compute((4, 64), lambda i, j: w.out[i, j] + first[i], name="shifted")
    s = ember.te.create_schedule(out.op)
    s[w.out].compute_inline()
    s[first].compute_inline()
    with pytest.raises(ScheduleError, match="another column"):
        gpu.row_block(s, out, [w.mean, w.var, w.rstd], 16, 4, staged=w.A, scope="local")


@needs_nvrtc
def test_a_long_row_takes_more_threads_to_stay_in_registers():
    # a vocabulary's logits at one token: 1024 threads of 32 elements (256 would hold 125 each)
    f = _source("softmax", (1, 32000))
    assert f.block == (1024, 1, 1) and "float in0_local[32];" in f.source
    assert f.source.count("const float4*>(&in0[") == 7  # the 8th vector a thread is past the row for some: guarded


@pytest.mark.parametrize("scope", ["local", "shared"])
def test_several_rows_a_block_a_warp_each(scope):
    # 6 rows, 4 a block (the second block's last two guarded), each on its warp (threadIdx.y)
    _check_variant("layer_norm", (6, 128), threads=32, scope=scope, rows_per_block=4)


@needs_nvrtc
def test_several_rows_a_block_keep_each_threads_columns_in_registers():
    types = [TensorType((64, 128))]
    bound, outs = infer_types("softmax", types, {"axis": -1})
    s, args = node_kernel("softmax", types, bound, outs, schedule=False, target=Target("cuda"))
    assert row_blocks(s, args[-1], Target("cuda"), threads=32, rows_per_block=8)
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert (f.grid, f.block) == ((8, 1, 1), (32, 8, 1))
    assert "float in0_local[4];" in f.source and f.source.count("const float4*>(&in0[") == 1


def _row_copy(column):
    """out[i, j] = A[i, column(j)] * 2, a row a block of 8 threads x 4 lanes, A's row copied into a "local"
    buffer at the block's row, spread over the threads as out's columns are."""
    A = ember.te.placeholder((4, 64), name="A")
    out = ember.te.compute((4, 64), lambda i, j: A[i, column(j)] * 2.0, name="out")
    s = ember.te.create_schedule(out.op)
    copy = s.cache_read(A, "local", [out])
    for stage in (s[out], s[copy]):
        row, col = stage.op.axis
        col, lanes = stage.split(col, factor=4)
        stage.vectorize(lanes)
        outer, thread = stage.split(col, factor=8)
        stage.unroll(outer)
        stage.bind(thread, ember.te.schedule.ThreadAxis("threadIdx.x"))
        if stage is s[out]:
            stage.reorder(row, thread, outer)
            stage.bind(row, ember.te.schedule.ThreadAxis("blockIdx.x"))
            s[copy].compute_at(stage, row)
    return s, [A, out]


@needs_nvrtc
def test_a_local_row_each_thread_touches_at_its_own_columns_is_shrunk_to_them():
    s, args = _row_copy(lambda j: j)
    assert "float A_local[8];" in ember.build(s, args, target="cuda", arch="sm_90").source  # 64 / 8 threads
    f = ember.build(s, args, target=ON_INTERPRETER)
    a, y = random_array((4, 64), "float32", RNG), np.full((4, 64), np.nan, "float32")
    f(a, y)
    np.testing.assert_array_equal(y, a * 2)
    s, args = _row_copy(lambda j: 63 - j)  # another thread's columns: the buffer stays whole
    assert "float A_local[64];" in ember.build(s, args, target="cuda", arch="sm_90").source
