"""GPU kernels: their CUDA C, compiled by NVRTC to an sm_90 cubin on any machine; their numbers
through the loop-IR interpreter (the same lowered function, threads run one after another), and on
the GPU where there is one."""

import gpu_kernels as kernels
import numpy as np
import pytest
from gpu_kernels import gpu_missing, needs_gpu, needs_nvrtc

import ember
from ember.errors import DeviceError
from ember.target import GPU

RNG = np.random.default_rng(7)
CASES = {
    "elementwise": (kernels.elementwise, lambda: [RNG.standard_normal(4096, dtype="float32") for _ in range(2)]),
    "row_sum": (kernels.row_sum, lambda: [RNG.standard_normal((512, 96), dtype="float32")]),
    "row_softmax": (kernels.row_softmax, lambda: [RNG.standard_normal((256, 64), dtype="float32")]),
    "row_softmax_block": (lambda: kernels.row_softmax(16, 1024, 128, per_block=True),
                          lambda: [RNG.standard_normal((16, 1024), dtype="float32") * 4]),
    "layer_norm": (kernels.layer_norm, lambda: [RNG.standard_normal((8, 512), dtype="float32") * 3 + 1,
                                                RNG.standard_normal(512, dtype="float32"),
                                                RNG.standard_normal(512, dtype="float32")]),
    "row_softmax_staged": (lambda: kernels.row_softmax(16, 1024, 128, per_block=True, staged=True),
                           lambda: [RNG.standard_normal((16, 1024), dtype="float32") * 4]),
    "layer_norm_staged": (lambda: kernels.layer_norm(staged=True),
                          lambda: [RNG.standard_normal((8, 512), dtype="float32") * 3 + 1,
                                   RNG.standard_normal(512, dtype="float32"),
                                   RNG.standard_normal(512, dtype="float32")]),
    "gemm": (kernels.gemm, lambda: [RNG.standard_normal((128, 64), dtype="float32"),
                                    RNG.standard_normal((64, 128), dtype="float32")]),
    "gemm_vector": (lambda: kernels.gemm(128, 128, 64, BM=64, BN=64, BK=8, TM=8, TN=8, vector=4),
                    lambda: [RNG.standard_normal((128, 64), dtype="float32"),
                             RNG.standard_normal((64, 128), dtype="float32")]),
    "matmul": (kernels.matmul, lambda: [RNG.standard_normal((128, 32), dtype="float32"),
                                        RNG.standard_normal((32, 128), dtype="float32")]),
}
TOLERANCE = {"elementwise": 1e-5, "row_sum": 1e-5, "row_softmax": 1e-5, "row_softmax_block": 1e-5, "layer_norm": 1e-4,
             "row_softmax_staged": 1e-5, "layer_norm_staged": 1e-4,
             "gemm": 1e-4, "gemm_vector": 1e-4, "matmul": 1e-4}


def _run(f, make, inputs):
    s, args, reference = make()
    out = np.zeros([ember.tir.expr.as_int(d) for d in args[-1].shape], "float32")
    f(*inputs, out)
    expected = reference(*inputs)
    return out, expected


@needs_nvrtc
@pytest.mark.parametrize("name", CASES)
def test_compiles_to_an_sm90_cubin(name):
    make, _ = CASES[name]
    s, args, _ = make()
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.binary[:4] == b"\x7fELF"
    assert f.arch == "sm_90"
    assert 'extern "C" __global__' in f.source and "blockIdx.x" in f.source and "threadIdx.x" in f.source
    assert "__expf" not in f.source  # no fast math


@pytest.mark.parametrize("name", CASES)
def test_interpreter_runs_the_bound_kernel(name):
    make, inputs = CASES[name]
    s, args, _ = make()
    f = ember.build(s, args, target="python")
    x = inputs()
    out, expected = _run(f, make, x)
    np.testing.assert_allclose(out, expected, rtol=TOLERANCE[name], atol=TOLERANCE[name])


@needs_nvrtc
def test_elementwise_launch_and_source():
    s, args, _ = kernels.elementwise(4096, threads=128)
    f = ember.build(s, args, target="cuda")
    assert (f.grid, f.block) == ((8, 1, 1), (128, 1, 1))  # 4 elements a thread
    assert "__launch_bounds__(128)" in f.source
    assert "= blockIdx.x;" in f.source and "= threadIdx.x;" in f.source
    assert "expf(" in f.source and "ember_max_float32" in f.source


@needs_nvrtc
def test_gemm_stages_tiles_in_shared_memory_between_barriers():
    s, args, _ = kernels.gemm(128, 128, 64)
    f = ember.build(s, args, target="cuda")
    assert (f.grid, f.block) == ((2, 2, 1), (16, 16, 1))
    shared = "__shared__ __align__(16) float"
    assert f"{shared} A_shared[512];" in f.source and f"{shared} B_shared[512];" in f.source
    assert "float C_local[16];" in f.source
    body = f.source[f.source.index("float A_shared"):]
    # the loads of both panels, a barrier, the products, a barrier before the next panels
    assert body.count("__syncthreads();") == 2
    first, second = body.index("__syncthreads();"), body.rindex("__syncthreads();")
    assert "A_shared[" in body[:first] and "C_local[0] = C_local[0] + A_shared" in body[first:second]


@needs_nvrtc
def test_matmul_lays_its_tiles_out_for_conflict_free_reads():
    s, args, _ = kernels.matmul(128, 128, 32)
    f = ember.build(s, args, target="cuda")
    shared = "__shared__ __align__(16) float"
    assert f"{shared} Ap_shared[512];" in f.source and f"{shared} Bp_shared[512];" in f.source
    # a thread's rows and columns are 16 apart: a warp's threads read consecutive elements
    assert "C_local[1] = C_local[1] + Ap_shared[ax0_1_0] * Bp_shared[ax1_1_0 + 16];" in f.source
    assert "C_local[4] = C_local[4] + Ap_shared[ax0_1_0 + 16] * Bp_shared[ax1_1_0];" in f.source


@needs_nvrtc
def test_row_reduction_keeps_the_row_in_registers():
    s, args, _ = kernels.row_softmax()
    f = ember.build(s, args, target="cuda")
    assert "float mx[1];" in f.source and "float total[1];" in f.source
    assert "__syncthreads" not in f.source  # nothing shared


@needs_nvrtc
def test_block_per_row_reduces_across_threads_through_shared_memory():
    s, args, _ = kernels.row_softmax(16, 1024, 128, per_block=True)
    f = ember.build(s, args, target="cuda")
    assert (f.grid, f.block) == ((16, 1, 1), (128, 1, 1))
    # each reduction: the threads' partials in shared memory, then every thread's own total
    shared = "__shared__ __align__(16) float"
    assert f"{shared} mx_rf[128];" in f.source and f"{shared} total_rf[128];" in f.source
    assert "  float mx[1];" in f.source and "  float total[1];" in f.source
    # a thread's part reduced in a register, stored once into its own partial (mx_rf[v1]: no barrier);
    # reading all of them needs one
    body = f.source[f.source.index("mx_rf[128]"):]
    assert body.count("__syncthreads();") == 2
    assert "mx_rf_local[0] = ember_max_float32(mx_rf_local[0], A[" in body
    assert body.index("mx_rf[v1] = mx_rf_local[0];") < body.index("__syncthreads();") \
        < body.index("mx[0] = ember_max_float32(mx[0]")


@needs_nvrtc
def test_ptx_when_asked():
    s, args, _ = kernels.elementwise(1024)
    f = ember.build(s, args, target="cuda", arch="sm_90", ptx=True)
    assert b".entry" in f.binary and f.binary.startswith(b"//")


@pytest.mark.skipif(gpu_missing() is None, reason="a GPU is present")
@needs_nvrtc
def test_call_without_a_gpu_says_why():
    s, args, reference = kernels.elementwise(1024)
    f = ember.build(s, args, target="cuda")
    a = np.ones(1024, "float32")
    with pytest.raises(DeviceError, match="no CUDA driver|no GPU"):
        f(a, a, np.zeros_like(a))


@needs_gpu
@pytest.mark.parametrize("name", CASES)
def test_gpu_matches_numpy(name):
    make, inputs = CASES[name]
    s, args, _ = make()
    f = ember.build(s, args, target="cuda")
    out, expected = _run(f, make, inputs())
    np.testing.assert_allclose(out, expected, rtol=TOLERANCE[name], atol=TOLERANCE[name])


@needs_gpu
def test_gpu_takes_torch_tensors_in_place():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    s, args, reference = kernels.gemm(256, 256, 128, BM=64, BN=64, BK=8, TM=4, TN=4)
    f = ember.build(s, args, target="cuda")
    a, b = torch.randn(256, 128, device="cuda"), torch.randn(128, 256, device="cuda")
    c = torch.empty(256, 256, device="cuda")
    f(a, b, c)
    torch.cuda.synchronize()
    np.testing.assert_allclose(c.cpu().numpy(), reference(a.cpu().numpy(), b.cpu().numpy()), rtol=1e-4, atol=1e-4)


def test_indices_are_int_unless_a_buffer_holds_2_to_the_31_elements():
    from ember.cuda.codegen import CUDARenderer

    for n, index in ((1 << 20, "int"), (1 << 31, "int64_t")):
        s, args, _ = kernels.elementwise(n, threads=256)
        source = CUDARenderer(GPU()).render_unit(ember.lower(s, args, target="cuda"))
        assert f"const {index} i_0_0 = blockIdx.x;" in source and f"const {index} i_0_1 = threadIdx.x;" in source


@needs_nvrtc
def test_nvrtc_builds_are_cached_by_source_arch_and_options(tmp_path, monkeypatch):
    from ember.cuda import nvrtc

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    source = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = expf(a[threadIdx.x]); }\n'
    cubin = nvrtc.compile_cuda(source, "sm_90")
    assert cubin[:4] == b"\x7fELF" and len(list(tmp_path.glob("cuda/*/*.cubin"))) == 1

    def no_compiler(*args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(nvrtc, "_nvrtc_compile", no_compiler)
    assert nvrtc.compile_cuda(source, "sm_90") == cubin  # a hit
    with pytest.raises(AssertionError, match="compiled again"):
        nvrtc.compile_cuda(source, "sm_80")  # another architecture is another entry


@needs_nvrtc
def test_a_compile_leaves_pythons_shared_bytes_alone(tmp_path, monkeypatch):
    """NVRTC writes its output and log into the buffers it is handed; an empty log is one byte,
    and a buffer made as b" " * 1 is Python's one shared b" ", which it turned into b"\\0" (every
    b" " of the process after: saved models' headers padded with zeros)."""
    from ember.cuda import nvrtc

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    nvrtc.compile_cuda('extern "C" __global__ void k(float* a) { a[0] = 1.0f; }\n', "sm_90")
    assert [i for i in range(256) if bytes([i])[0] != i] == []


@needs_nvrtc
def test_a_compile_error_shows_the_source_line():
    from ember.cuda import nvrtc
    from ember.errors import BuildError

    shown = r'identifier "undefined_x" is undefined\n.*\n>     2 \|   a\[0\] = undefined_x;'
    with pytest.raises(BuildError, match=shown):
        nvrtc.compile_cuda('extern "C" __global__ void k(float* a) {\n  a[0] = undefined_x;\n}\n', "sm_90")


@needs_gpu
def test_gpu_takes_cupy_arrays_in_place():
    cp = pytest.importorskip("cupy")
    s, args, reference = kernels.elementwise(4096, threads=256)
    f = ember.build(s, args, target="cuda")
    a, b = (cp.asarray(RNG.standard_normal(4096, dtype="float32")) for _ in range(2))
    c = cp.empty(4096, "float32")
    f(a, b, c)
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_allclose(cp.asnumpy(c), reference(cp.asnumpy(a), cp.asnumpy(b)), rtol=1e-5, atol=1e-5)
