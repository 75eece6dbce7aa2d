"""The default GPU schedules of every operator family (ember.schedules.gpu, what the CUDA target
chooses): each operator's kernel checked against its NumPy reference on the interpreter with GPU
semantics (Target("python", schedules="gpu"): blocks and threads in a shuffled order, races
checked), and compiled by NVRTC for sm_90, with the kernel shape the family gives it."""

import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

import ember
from ember import te
from ember.cuda import schedules as gpu
from ember.graph.core import TensorType
from ember.ops.registry import infer_types
from ember.schedules.apply import node_kernel
from ember.target import Target
from ember.testing import check_op, random_array

RNG = np.random.default_rng(23)
ON_INTERPRETER = Target("python", schedules="gpu")


def _x(*shape):
    return random_array(shape, "float32", RNG)


# name, inputs, attributes, what the CUDA source shows of the kernel's shape
CASES = {
    "elementwise": ("gelu", lambda: [_x(6, 40)], {}, "float4"),  # 4 elements a thread, 16 bytes
    "broadcast": ("add", lambda: [_x(4, 8, 16), _x(16)], {}, "blockIdx.x"),
    "injective": ("transpose", lambda: [_x(3, 5, 7)], {"perm": [2, 0, 1]}, "threadIdx.x"),
    "gather": ("gather", lambda: [_x(10, 6), np.array([3, -1, 9], "int64")], {"axis": 0}, "ember_index("),
    "scatter": ("scatter_elements", lambda: [_x(5, 4), np.array([[1, 0, 2, 3], [4, 1, 0, 2]], "int64"), _x(2, 4)],
                {"axis": 0}, "ember_index("),
    "long reduction": ("sum", lambda: [_x(4, 512)], {"axes": [1]}, "__shfl_xor_sync"),  # a block an output
    "short reduction": ("mean", lambda: [_x(4, 6, 10)], {"axes": [1]}, "threadIdx.x"),  # a thread an output
    "pooling": ("max_pool2d", lambda: [_x(1, 2, 8, 8)], {"kernel": [2, 2], "strides": [2, 2]}, "threadIdx.x"),
    "softmax": ("softmax", lambda: [_x(3, 256)], {"axis": 1}, "__shfl_xor_sync"),  # a block a row
    "layer norm": ("layer_norm", lambda: [_x(2, 128) * 3 + 1, _x(128), _x(128)],
                   {"normalized_ndim": 1, "eps": 1e-5}, "__shfl_xor_sync"),
    "softmax, not last": ("softmax", lambda: [_x(2, 5, 6)], {"axis": 1}, "threadIdx.x"),  # a thread a row
    "gemm": ("matmul", lambda: [_x(64, 16), _x(16, 64)], {}, "cp.async.cg"),  # pipelined tiles in shared memory
    "fp16 gemm": ("matmul", lambda: [random_array((64, 32), "float16", RNG), random_array((32, 64), "float16", RNG)],
                  {}, "mma.sync.aligned.m16n8k16"),  # on Tensor Cores
    "batched matmul": ("matmul", lambda: [_x(2, 5, 7), _x(7, 3)], {}, "threadIdx.x"),
    "gemv": ("gemm", lambda: [_x(1, 100), _x(100, 64)], {}, "threadIdx.y"),  # a column's sum over 8 threads
    "conv": ("conv2d", lambda: [_x(1, 3, 6, 6), _x(4, 3, 3, 3)], {}, "threadIdx.x"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_gpu_schedule_is_right_on_the_interpreter(case):
    name, inputs, attrs, _ = CASES[case]
    x = inputs()
    tolerance = 1e-3 if x[0].dtype == np.float16 else 1e-4  # (an fp16 output rounds to 11 bits)
    check_op(name, x, attrs, rtol=tolerance, atol=tolerance, targets=[ON_INTERPRETER])


@needs_nvrtc
@pytest.mark.parametrize("case", CASES)
def test_the_gpu_schedule_compiles_for_sm90(case):
    name, inputs, attrs, shows = CASES[case]
    types = [TensorType(x.shape, x.dtype.name) for x in inputs()]
    bound, outs = infer_types(name, types, attrs)
    s, args = node_kernel(name, types, bound, outs, target=Target("cuda"))
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.binary[:4] == b"\x7fELF" and shows in f.source
    assert f.block != (1, 1, 1)  # bound to threads


def test_the_cuda_target_takes_the_gpu_family():
    assert Target("cuda").schedules == "gpu" and Target("python").schedules == "cpu"


def test_a_split_reduction_keeps_its_tail_guarded_over_a_symbolic_length():
    # rfactor of a split that does not divide the reduction: the partials' sums guard the tail
    k, n = te.var("k"), 64
    A, B = te.placeholder((1, k), name="A"), te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((1, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    gpu.gemv(s, C, s.cache_write(C, "local"), columns=32, slices=8)
    f = ember.build(s, [A, B, C], target=ON_INTERPRETER)
    for length in (70, 64):  # a tail of 6, none
        a, b = _x(1, length), _x(length, n)
        c = np.full((1, n), np.nan, "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_global_average_pool_at_batch_1_fills_the_gpu(dtype):
    # ResNet's: 512 channels of 7x7, a block (one warp) a channel, not an output a thread (4 blocks)
    x = random_array((1, 512, 7, 7), dtype, RNG)
    check_op("global_avg_pool", [x], {}, rtol=1e-3, atol=1e-3, targets=[ON_INTERPRETER])
    types = [TensorType(x.shape, dtype)]
    bound, outs = infer_types("global_avg_pool", types, {})
    target = Target("cuda")
    s, args = node_kernel("global_avg_pool", types, bound, outs, target=target)
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.grid[0] >= target.gpu.multiprocessors and f.block == (32, 1, 1)


def test_topk_takes_a_symbolic_count_of_rows_and_names_itself_past_its_rows_limit():
    from ember.errors import ScheduleError
    from ember.testing import check_op_sizes

    sets = [[random_array((rows, 12), "float32", RNG)] for rows in (1, 5)]
    check_op_sizes("topk", [TensorType(("n", 12), "float32")], {"k": 4}, sets, rtol=0, atol=0,
                   targets=[ON_INTERPRETER])
    types = [TensorType((2, 50257), "float32")]  # a vocabulary's logits
    bound, outs = infer_types("topk", types, {"k": 5})
    with pytest.raises(ScheduleError, match="topk over rows of 50257 elements has no GPU schedule"):
        node_kernel("topk", types, bound, outs, target=Target("cuda"))


def test_a_long_reduction_over_a_symbolic_count_of_rows_keeps_a_block_a_row():
    from ember.testing import check_op_sizes

    types = [TensorType(("n", 512), "float32")]
    sets = [[random_array((rows, 512), "float32", RNG)] for rows in (2, 5)]
    check_op_sizes("mean", types, {"axes": (1,)}, sets, rtol=1e-5, atol=1e-5, targets=[ON_INTERPRETER])
    bound, outs = infer_types("mean", types, {"axes": (1,)})
    s, args = node_kernel("mean", types, bound, outs, target=Target("cuda"))
    assert "__shfl_xor_sync" in ember.build(s, args, target="cuda", arch="sm_90").source
