"""The CUDA renderer's fast paths: 16-byte loads and stores of 4-lane vectorized loops
(ember.cuda.vectors) and cross-thread reductions through warp shuffles (ember.cuda.warp). Each is
checked in its source, compiled by NVRTC, and for its numbers through the interpreter (the same
lowered function) and on the GPU where there is one; where its conditions fail the loop stays as
it was."""

import gpu_kernels as kernels
import numpy as np
import pytest
from gpu_kernels import needs_gpu, needs_nvrtc

import ember
from ember import te
from ember.cuda import schedules
from ember.cuda.vectors import lane_uniform, vector_loop
from ember.errors import ArgumentTypeError
from ember.target import GPU
from ember.tir.arith import simplify
from ember.tir.expr import Buffer, BufferLoad, Var, binary, const
from ember.tir.expr_functor import substitute, uses_var
from ember.tir.stmt import BufferStore, For

RNG = np.random.default_rng(11)


def _shifted(n: int, shift: int):
    """C[i] = A[i + shift] * 2 + B[i], scheduled elementwise with 4 lanes a thread."""
    A, B = te.placeholder((n + shift,), name="A"), te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i + shift] * 2.0 + B[i], name="C")
    s = te.create_schedule(C.op)
    schedules.elementwise(s, C, 64)
    return s, [A, B, C], lambda a, b: a[shift:] * 2 + b


def _interpret(s, args, inputs):
    out = np.zeros([ember.tir.expr.as_int(d) for d in args[-1].shape], "float32")
    ember.build(s, args, target="python")(*inputs, out)
    return out


@needs_nvrtc
@pytest.mark.parametrize("n, shift", [(4096, 0), (4096, 1), (4096, 4), (1030, 0)])
def test_contiguous_aligned_accesses_are_16_bytes(n, shift):
    s, args, reference = _shifted(n, shift)
    source = ember.build(s, args, target="cuda", arch="sm_90").source
    aligned = n % 4 == 0  # else the split's guard keeps every lane scalar
    assert ("*reinterpret_cast<float4*>(&C[" in source) == aligned
    assert ("*reinterpret_cast<const float4*>(&B[" in source) == aligned
    assert ("*reinterpret_cast<const float4*>(&A[" in source) == (aligned and shift % 4 == 0)
    a, b = RNG.standard_normal(n + shift, dtype="float32"), RNG.standard_normal(n, dtype="float32")
    np.testing.assert_allclose(_interpret(s, args, [a, b]), reference(a, b), rtol=1e-6, atol=1e-6)


def test_a_loop_reading_its_output_at_another_lane_stays_per_lane():
    C, v, t = Buffer("C", (64,), "float32"), Var("v", "int32"), Var("t", "int32")
    base = binary("*", t, 4)
    own = BufferLoad(C, (binary("+", base, v),), "float32")
    other = BufferLoad(C, (binary("+", binary("+", base, 4), v),), "float32")
    store = (binary("+", base, v),)
    assert vector_loop(For(v, 0, 4, "vectorized", BufferStore(C, binary("+", own, 1.0), store))) is not None
    assert vector_loop(For(v, 0, 4, "vectorized", BufferStore(C, binary("+", other, 1.0), store))) is None


@needs_nvrtc
def test_block_reductions_fold_partials_with_warp_shuffles():
    s, args, _ = kernels.row_softmax(16, 1024, 128, per_block=True)
    source = ember.build(s, args, target="cuda", arch="sm_90").source
    assert source.count("__shfl_xor_sync(0xffffffffu, mx_warp, ") == 5
    assert source.count("__shfl_xor_sync(0xffffffffu, total_warp, ") == 5
    assert "vk_1a < 128; ++" not in source  # no thread folds all 128 partials


@needs_nvrtc
def test_no_shuffles_unless_every_warp_is_whole():
    s, args, reference = kernels.row_softmax(4, 96, 48, per_block=True)
    source = ember.build(s, args, target="cuda", arch="sm_90").source
    assert "__shfl" not in source and "< 48; ++" in source
    a = RNG.standard_normal((4, 96), dtype="float32")
    np.testing.assert_allclose(_interpret(s, args, [a]), reference(a), rtol=1e-5, atol=1e-6)


@needs_gpu
def test_gpu_refuses_a_misaligned_argument_of_a_vector_access():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    s, args, reference = _shifted(4096, 0)
    f = ember.build(s, args, target="cuda")
    assert {b.name for b in f.aligned} == {"A", "B", "C"}
    a, b = torch.randn(4097, device="cuda"), torch.randn(4096, device="cuda")
    c = torch.empty(4096, device="cuda")
    with pytest.raises(ArgumentTypeError, match="multiple of 16"):
        f(a[1:], b, c)
    f(a[:4096], b, c)
    torch.cuda.synchronize()
    np.testing.assert_allclose(c.cpu().numpy(), reference(a[:4096].cpu().numpy(), b.cpu().numpy()), rtol=1e-6,
                               atol=1e-6)


@needs_nvrtc
def test_gemm_copies_its_tiles_16_bytes_at_a_time():
    s, args, _ = kernels.gemm(128, 128, 64, BM=64, BN=64, BK=8, TM=8, TN=8, vector=4)
    source = ember.build(s, args, target="cuda", arch="sm_90").source
    for copy in ("const float4*>(&A[", "const float4*>(&B[", "float4*>(&A_shared[", "float4*>(&B_shared[",
                 "const float4*>(&B_shared["):
        assert copy in source
    assert "float B_shared_local[8];" in source and "] = B_shared_v_1.w;" in source  # registers, lane by lane


@needs_nvrtc
def test_a_staged_row_is_read_from_global_memory_once():
    s, args, _ = kernels.row_softmax(16, 1024, 128, per_block=True, staged=True)
    source = ember.build(s, args, target="cuda", arch="sm_90").source
    assert "__shared__ __align__(16) float A_shared[1024];" in source
    assert source.count("A[i * 1024") == 1  # the one 16-byte copy into shared memory
    body = source[source.index("*reinterpret_cast<float4*>(&A_shared["):]
    assert body.index("__syncthreads();") < body.index("mx_rf_local[0] = ember_max_float32(mx_rf_local[0], A_shared[")


def test_a_padded_rows_condition_is_one_for_a_vectors_lanes_where_the_row_is_whole_vectors():
    lane, x, n = Var("lane", "int64"), Var("x", "int64"), Var("n", "int64")
    start = x * 8  # (a thread's 8 halves of a row)
    cond = binary("<", start + lane, const(40, "int64"))
    uniform = lane_uniform(cond, lane, 8)
    assert uniform is not None and not uses_var(uniform, [lane])
    for at in range(7):  # every lane of the vector at x is inside exactly where the lane-0 condition holds
        lanes = {bool(simplify(substitute(cond, {x: const(at, "int64"), lane: const(v, "int64")})).value)
                 for v in range(8)}
        assert lanes == {bool(simplify(substitute(uniform, {x: const(at, "int64")})).value)}
    assert lane_uniform(binary("<", start + lane, const(36, "int64")), lane, 8) is None  # (a vector straddles 36)
    assert lane_uniform(binary("<", start + lane, n), lane, 8) is None  # (a symbolic row: n % 8 unknown)
    assert lane_uniform(binary("<", start + 2 * lane, const(40, "int64")), lane, 8) is None  # (lanes 2 apart)


def _chain(n: int, threads: int, per_thread: int):
    A, B = te.placeholder((n,), name="A"), te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: te.exp(A[i]) * B[i] + A[i], name="C")
    s = te.create_schedule(C.op)
    schedules.elementwise(s, C, threads, per_thread=per_thread)
    return s, [A, B, C]


@needs_nvrtc
def test_several_vectors_a_thread_are_16_byte_accesses_each():
    source = ember.build(*_chain(512, 16, 4), target="cuda", arch="sm_90").source  # 2 blocks of 16 x 4 vectors
    assert source.count("*reinterpret_cast<float4*>(&C[") == 4 == source.count("const float4*>(&A[")


def test_several_vectors_a_thread_guard_the_last_block():
    # 100 vectors over blocks of 16 threads x 4 vectors: the last block's threads past the end do nothing
    f = ember.build(*_chain(400, 16, 4), target=ember.Target("python", schedules="gpu"))
    a, b = (RNG.standard_normal(400).astype("float32") for _ in range(2))
    c = np.full(400, np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, np.exp(a) * b + a, rtol=1e-5, atol=1e-6)


def test_floor_division_by_a_power_of_two_is_a_shift_and_a_mask():
    """`x // 2^s` and `x % 2^s` of signed integers that may be negative are rendered as a shift
    and a mask (a tile kernel's alignment tests of a running offset, each iteration), which on two's
    complement are numpy's floored quotient and remainder: the C compiled for the CPU against
    NumPy on random values of both signs; another divisor keeps the floor helpers."""
    import ctypes

    from ember.cuda.codegen import CUDARenderer
    from ember.runtime.build import build_library

    renderer = CUDARenderer(GPU())
    renderer._name = lambda v: v.name
    renderer._nonnegative_vars, renderer._helpers = set(), {}  # (x may be negative: no plain `/`, `%`)
    lines = []
    for elem, ctype in (("int32", "int32_t"), ("int64", "int64_t")):
        x = Var("x", elem)
        renderer._vars = {x}
        for name, e in (("div8", x // 8), ("mod16", x % 16), ("div1", x // 1)):
            text = renderer._e(e)
            assert "ember_floor" not in text and (">>" in text or "&" in text), text
            lines.append(f"void {name}_{elem}(const {ctype}* in, {ctype}* out, int n) {{\n"
                         f"  for (int i = 0; i < n; ++i) {{ {ctype} x = in[i]; out[i] = {text}; }}\n}}")
        assert "ember_floordiv" in renderer._e(x // 24)
    lib = ctypes.CDLL(str(build_library("#include <stdint.h>\n" + "\n".join(lines) + "\n")))
    for elem in ("int32", "int64"):
        values = RNG.integers(np.iinfo(elem).min, np.iinfo(elem).max, 512, dtype=elem, endpoint=True)
        values[:4] = (np.iinfo(elem).min, -1, 0, np.iinfo(elem).max)
        for name, want in (("div8", values // 8), ("mod16", values % 16), ("div1", values)):
            out = np.empty_like(values)
            getattr(lib, f"{name}_{elem}")(values.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(
                ctypes.c_void_p), ctypes.c_int(values.size))
            np.testing.assert_array_equal(out, want, err_msg=f"{name} {elem}")
