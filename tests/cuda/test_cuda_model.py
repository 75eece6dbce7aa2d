"""Whole models for target "cuda": every kernel scheduled by the GPU family and built by NVRTC
(sm_90 without a GPU), the model run on the interpreter with GPU semantics
(Target("cuda", simulate=True)) and checked against torch at 1e-4; on a GPU, through the driver
(skipped with the reason where there is none); the driver path's bookkeeping (the arena, graphs
per address and per size, saving and loading, profiling) on a stand-in driver over host memory."""

import ctypes
import json
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gpu_kernels import needs_gpu, needs_nvrtc

import ember
from ember.cuda.limits import local_bytes
from ember.errors import ArgumentTypeError, ArtifactError, CompileError, ConfigError, DeviceError
from ember.target import Target

pytestmark = needs_nvrtc
SIMULATED = Target("cuda", simulate=True)
TOL = 1e-4


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(y.flatten(1))


class Block(torch.nn.Module):
    """A transformer block: layer norm, causal attention over 2 heads, a GELU MLP, residuals."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # one fused kernel on the GPU
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


MODELS = {
    "mlp": (lambda: torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)),
            lambda: torch.randn(2, 16)),
    "cnn": (SmallCNN, lambda: torch.randn(1, 2, 6, 6)),
    "transformer block": (Block, lambda: torch.randn(1, 4, 16)),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def simulated(request):
    torch.manual_seed(0)
    make, example = MODELS[request.param]
    model = make().eval()
    return model, ember.compile(model, (example(),), target=SIMULATED), example


def test_a_model_runs_with_gpu_semantics_and_matches_torch(simulated):
    model, cm, example = simulated
    x = example()  # fresh data, not the traced example's
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(cm(x).numpy(), expected, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cm(x.numpy()), expected, rtol=TOL, atol=TOL)  # NumPy in, NumPy out
    assert cm.source.count("__global__") == len(cm.kernels)  # every kernel CUDA C, built by NVRTC
    assert "with GPU semantics" in cm.summary()
    with pytest.raises(ConfigError, match="is simulated"):
        cm.save("unused")


class Residual(torch.nn.Module):
    """h + linear(norm(h)) at batch 1: the sum may take h's buffer in place (the memory plan)."""

    def __init__(self, d=64):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(d, d), torch.nn.Linear(d, d), torch.nn.Linear(d, 32)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.c(h + self.b(self.norm(h)))


def test_a_one_row_product_is_split_over_threads_and_stores_each_element_once():
    torch.manual_seed(6)
    model = Residual().eval()
    cm = ember.compile(model, (torch.randn(1, 64),), target=SIMULATED)
    assert any("shares" in t for t in cm.plan.to_json())  # the residual overwritten in place
    assert sum("threadIdx.y" in str(f) for f in cm._entry.funcs.values()) == 3  # the three linear layers
    x = torch.randn(1, 64)
    with torch.no_grad():
        np.testing.assert_allclose(cm(x).numpy(), model(x).numpy(), rtol=TOL, atol=TOL)


def test_attention_is_one_fused_kernel_on_the_gpu(simulated):
    model, cm, _ = simulated
    ops = {op for k in cm.kernels for op in k.ops}
    assert ("flash_attention" in ops) == isinstance(model, Block) and "softmax" not in ops


def test_each_thread_computes_only_the_outputs_it_writes():
    """A convolution fused with its bias and ReLU, a linear layer with its bias: each output
    element is computed in the thread that writes it, not the whole product in every thread
    (which the driver refuses to launch once it passes a thread's local memory)."""
    torch.manual_seed(2)
    cm = ember.compile(SmallCNN().eval(), (torch.randn(1, 2, 6, 6),), target="cuda")
    per_thread = {name: local_bytes(k.func)[0] for name, k in cm._entry.kernels.items()}
    assert any(name.startswith("conv2d_relu") for name in per_thread) and max(per_thread.values()) <= 16, per_thread


def test_the_cuda_target_takes_no_cpu_layouts_or_packing():
    torch.manual_seed(1)
    model = SmallCNN().eval()
    cm = ember.compile(model, (torch.randn(1, 2, 6, 6),), target=SIMULATED)
    ops = {op for k in cm.kernels for op in k.ops}
    assert "conv2d" in ops and not any("nchwc" in op or "packed" in op for op in ops)
    assert not {"pad_gemv", "layout", "pack_weights", "fold_attention"} & {r.name for r in cm.stats.passes}


def test_a_kernel_without_a_gpu_schedule_is_named_at_compile_time():
    class Total(torch.nn.Module):
        def forward(self, x):
            return (x * 2).sum()  # a scalar: no block or thread to bind

    with pytest.raises(CompileError, match=r"mul \+ sum.*no GPU schedule"):
        ember.compile(Total(), (torch.randn(3, 4),), target=SIMULATED)


def test_quantized_weights_are_refused_before_anything_compiles():
    with pytest.raises(ConfigError, match="weights='int8' does not compile for target 'cuda' yet"):
        ember.compile(torch.nn.Linear(3, 4), (torch.randn(2, 3),), target=SIMULATED, weights="int8")


def test_simulate_is_for_the_cuda_target_only():
    with pytest.raises(ConfigError, match="simulate=True is for target 'cuda'"):
        Target("c", simulate=True)


@pytest.fixture(scope="module")
def on_gpu():
    torch.manual_seed(2)
    model = MODELS["mlp"][0]().eval()
    return model, ember.compile(model, (torch.randn(2, 16),), target="cuda")


def test_without_a_gpu_a_call_is_a_device_error_not_the_compile(on_gpu):
    from gpu_kernels import gpu_missing

    if gpu_missing() is None:
        pytest.skip("this machine has a GPU")
    _, cm = on_gpu
    assert "from Python through the driver API" in cm.summary()
    with pytest.raises(DeviceError):
        cm(torch.randn(2, 16))


@needs_gpu
def test_on_the_gpu_torch_cuda_tensors_in_place_and_numpy_copied(on_gpu):
    model, cm = on_gpu
    x = torch.randn(2, 16)
    with torch.no_grad():
        expected = model(x).numpy()
    got = cm(x.cuda())
    assert got.is_cuda
    np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cm(x.numpy()), expected, rtol=TOL, atol=TOL)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = cm(x.cuda(), stream=stream)
    stream.synchronize()
    np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=TOL, atol=TOL)


@needs_gpu
def test_torch_compile_runs_a_module_on_the_gpu_on_the_gpu():
    import warnings

    from ember.torch_backend import EmberFallbackWarning

    torch.manual_seed(3)
    model = SmallCNN().eval().cuda()
    compiled = torch.compile(model, backend="ember")
    x = torch.randn(1, 2, 6, 6, device="cuda")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", EmberFallbackWarning)  # ember ran it, PyTorch did not
        got = compiled(x)
        expected = model(x)
    assert got.is_cuda
    torch.testing.assert_close(got, expected, rtol=TOL, atol=TOL)


@needs_gpu
def test_on_the_gpu_the_second_call_replays_a_cuda_graph(on_gpu):
    model, cm = on_gpu
    x = torch.randn(2, 16)
    with torch.no_grad():
        expected = model(x).numpy()
    xs = x.cuda()
    for _ in range(4):  # plain, through the input slot, captured in place, replayed
        got = cm(xs)
        np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=TOL, atol=TOL)
    assert "replayed as one CUDA graph" in cm.summary()
    np.testing.assert_allclose(cm(x.numpy()), expected, rtol=TOL, atol=TOL)


@needs_gpu
def test_on_the_gpu_an_embedding_replays_a_graph_and_an_index_out_of_range_is_raised():
    """A gather checks the indices it reads; the model reads the check after its call, so the
    launches are captured as a graph all the same, and a bad index raises from a replay too."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 4)).eval()
    cm = ember.compile(model, (torch.tensor([[1, 2, 3]]),), target="cuda")
    ids = torch.tensor([[4, 9, 0]], device="cuda")
    with torch.no_grad():
        expected = model(ids.cpu()).numpy()
    for _ in range(3):
        np.testing.assert_allclose(cm(ids).cpu().numpy(), expected, rtol=TOL, atol=TOL)
    assert "replayed as one CUDA graph" in cm.summary()
    bad = torch.tensor([[4, 12, 0]], device="cuda")
    for _ in range(3):  # the first call with new inputs, then replays of their graph
        with pytest.raises(ember.errors.IndexOutOfRangeError, match="index 12 is out of range for an axis of size 10"):
            cm(bad)
    np.testing.assert_allclose(cm(ids).cpu().numpy(), expected, rtol=TOL, atol=TOL)  # the check was cleared


@needs_gpu
def test_on_the_gpu_a_cpu_tensor_is_refused_before_any_launch(on_gpu):
    _, cm = on_gpu
    with pytest.raises(ember.errors.ArgumentTypeError, match=r"is on cpu.*to\('cuda:0'\)"):
        cm(torch.randn(2, 16))


# -- the driver path's bookkeeping on a stand-in driver whose device memory is host memory --------
class HostDriver:
    """The driver calls CUDAModel makes, over host memory: an allocation is a NumPy buffer, a copy
    a memmove; `launches` counts the kernels run (each on the interpreter, GPU semantics). A stream
    being captured records its launches and copies instead (a graph: the recorded list), which
    `cuGraphLaunch` runs; `graph_launches` counts those. `refuse_capture`: the error
    cuStreamBeginCapture returns (0: none)."""

    class CUresult:
        CUDA_SUCCESS = 0

    class CUpointer_attribute:  # noqa: N801 (the driver's name)
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 8

    class CUstream_flags:  # noqa: N801
        CU_STREAM_NON_BLOCKING = 1

    class CUstreamCaptureMode:  # noqa: N801
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

    def __init__(self, ordinal_of_arrays=0):
        self.buffers, self.launches, self.ordinal_of_arrays = {}, 0, ordinal_of_arrays
        self.capturing, self.streams, self.graph_launches, self.refuse_capture = {}, 0, 0, 0

    @staticmethod
    def CUstream(handle):  # noqa: N802
        return handle

    def run(self, stream, work):
        """Do `work` now, or record it when the stream is being captured."""
        if stream in self.capturing:
            self.capturing[stream].append(work)
        else:
            work()

    def cuMemAlloc(self, n):  # noqa: N802
        buf = np.empty(n, np.uint8)
        self.buffers[buf.ctypes.data] = buf
        return 0, buf.ctypes.data

    def cuMemFree(self, p):  # noqa: N802
        self.buffers.pop(int(p))
        return (0,)

    def cuMemcpyHtoD(self, dst, src, n):  # noqa: N802
        ctypes.memmove(dst, src, n)
        return (0,)

    cuMemcpyDtoH = cuMemcpyHtoD

    def cuMemcpyDtoDAsync(self, dst, src, n, stream):  # noqa: N802
        self.run(stream, lambda: ctypes.memmove(dst, src, n))
        return (0,)

    cuMemcpyHtoDAsync = cuMemcpyDtoDAsync

    def cuStreamSynchronize(self, stream):  # noqa: N802
        return (0,)

    def cuPointerGetAttribute(self, attribute, address):  # noqa: N802
        return 0, self.ordinal_of_arrays

    def cuStreamCreate(self, flags):  # noqa: N802
        self.streams += 1
        return 0, 1000 + self.streams

    def cuStreamBeginCapture(self, stream, mode):  # noqa: N802
        if self.refuse_capture:
            return (self.refuse_capture,)
        self.capturing[stream] = []
        return (0,)

    def cuStreamEndCapture(self, stream):  # noqa: N802
        return 0, self.capturing.pop(stream)

    def cuGraphInstantiate(self, graph, flags):  # noqa: N802
        return 0, tuple(graph)

    def cuGraphLaunch(self, executable, stream):  # noqa: N802
        self.graph_launches += 1
        for work in executable:
            work()
        return (0,)

    def cuGraphDestroy(self, graph):  # noqa: N802
        return (0,)

    cuGraphExecDestroy = cuStreamDestroy = cuGraphDestroy

    def cuEventCreate(self, flags):  # noqa: N802
        return 0, [0.0]  # the host's time when the stream reached it

    def cuEventRecord(self, event, stream):  # noqa: N802
        self.run(stream, lambda: event.__setitem__(0, time.perf_counter()))
        return (0,)

    def cuEventSynchronize(self, event):  # noqa: N802
        return (0,)

    def cuEventElapsedTime(self, start, end):  # noqa: N802
        return 0, (end[0] - start[0]) * 1e3

    cuEventDestroy = cuGraphDestroy

    def cuGetErrorName(self, err):  # noqa: N802
        return 0, b"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"

    def cuGetErrorString(self, err):  # noqa: N802
        return 0, b"operation not permitted when stream is capturing"


class DeviceArray:
    """A GPU array as CuPy shows one (__cuda_array_interface__), over the stand-in's memory."""

    def __init__(self, host: np.ndarray, cu: HostDriver):
        _, self.address = cu.cuMemAlloc(host.nbytes)
        ctypes.memmove(self.address, host.ctypes.data, host.nbytes)
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str, "strides": None,
                                         "data": (self.address, False), "version": 3}


@pytest.fixture
def host_driver(monkeypatch):
    from ember.cuda import driver, kernel
    from ember.cuda.simt import SimtKernel
    from ember.runtime.args import evaluate
    from ember.runtime.interpreted import _view
    from ember.tir import dtype as dt

    cu = HostDriver()

    def launch(self, pointers, stream=0, sizes=(), report=True):  # the kernel on the interpreter, at those addresses
        func, pointers, sizes = self.func, list(pointers), list(sizes)
        env = dict(zip(func.size_vars, sizes))

        def run():
            arrays = [_view(p, int(np.prod([evaluate(d, env) for d in b.shape])), np.dtype(dt.to_numpy(b.dtype)))
                      for b, p in zip(func.params, pointers)]
            SimtKernel(func).pyfunc(*arrays, *sizes)
            cu.launches += 1

        cu.run(stream, run)

    monkeypatch.setattr(driver, "driver", lambda: cu)
    monkeypatch.setattr(driver, "device", lambda ordinal=0: SimpleNamespace(ordinal=0, activate=lambda: None))
    monkeypatch.setattr(kernel.CUDAKernel, "launch", launch)
    return cu


def on_stand_in(cm):
    """The model as never called: its device state (the weights, the arena, graphs) was an earlier
    stand-in driver's."""
    cm._open(cm._entry)
    return cm


def test_the_driver_path_runs_the_program_over_one_arena_and_uploaded_weights(on_gpu, host_driver):
    model, cm = on_gpu
    on_stand_in(cm)
    x = torch.randn(2, 16)
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(cm(x.numpy()), expected, rtol=TOL, atol=TOL)  # NumPy: copied in and out
    arena, weights = cm._arena, cm._weights_on_device
    got = cm(DeviceArray(x.numpy(), host_driver))  # a GPU array: in place
    np.testing.assert_allclose(got, expected, rtol=TOL, atol=TOL)
    assert (cm._arena, cm._weights_on_device) == (arena, weights)  # allocated once
    assert host_driver.launches == 2 * len(cm.kernels)
    # the arena, the weights, the GPU array, the slots a graph reads and writes: the call's copies freed
    assert len(host_driver.buffers) == 4


def test_the_driver_path_refuses_cpu_tensors_and_other_gpus_before_any_launch(on_gpu, host_driver):
    cm = on_stand_in(on_gpu[1])
    with pytest.raises(ArgumentTypeError, match=r"is on cpu; model model runs on cuda:0"):
        cm(torch.randn(2, 16))
    host_driver.ordinal_of_arrays = 1
    with pytest.raises(ArgumentTypeError, match="is on cuda:1"):
        cm(DeviceArray(np.ones((2, 16), np.float32), host_driver))
    with pytest.raises(ArgumentTypeError, match="has dtype float64"):
        cm(np.ones((2, 16)))
    assert host_driver.launches == 0


def test_from_the_second_call_the_launches_are_one_cuda_graph_recaptured_on_a_new_input_pointer(on_gpu, host_driver):
    model, cm = on_gpu
    on_stand_in(cm)
    kernels = len(cm.kernels)

    def call(x, array=None):
        with torch.no_grad():
            expected = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(cm(x if array is None else array), expected, rtol=TOL, atol=TOL)
        return cm._graphs.captures, host_driver.graph_launches

    x = np.random.default_rng(0).standard_normal((2, 16), np.float32)
    assert call(x) == (0, 0) and host_driver.launches == kernels  # the first call: launches one by one
    assert "not as a CUDA graph: the first call" in cm.summary()
    assert call(x + 1) == (1, 1)  # captured (nothing run), then replayed: NumPy copied into the input slot
    assert call(x - 1) == (1, 2)  # new values, the same slots: the same graph
    assert host_driver.launches == 3 * kernels
    assert "replayed as one CUDA graph (1 captured" in cm.summary()
    a = DeviceArray(x * 2, host_driver)
    assert call(x * 2, a) == (1, 3)  # a GPU array copied into the slot: its address is new
    assert call(x * 2, a) == (2, 4)  # the same address again: a graph that reads it in place
    assert call(x * 2, a) == (2, 5)
    b = DeviceArray(x * 3, host_driver)
    assert call(x * 3, b) == (2, 6)  # another address: through the slot again
    assert call(x * 3, b) == (3, 7)  # and stable: captured on it
    assert host_driver.launches == 8 * kernels


def test_graphs_off_or_a_capture_that_fails_launch_one_by_one_and_say_why(on_gpu, host_driver, monkeypatch):
    model, cm = on_gpu
    x = np.random.default_rng(1).standard_normal((2, 16), np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "0")
    on_stand_in(cm)
    for _ in range(2):
        np.testing.assert_allclose(cm(x), expected, rtol=TOL, atol=TOL)
    assert host_driver.graph_launches == 0 and "not as a CUDA graph: CUDA graphs are off" in cm.summary()
    monkeypatch.delenv("EMBER_CUDA_GRAPHS")
    on_stand_in(cm)
    host_driver.refuse_capture = 900
    for _ in range(3):
        np.testing.assert_allclose(cm(x), expected, rtol=TOL, atol=TOL)
    assert host_driver.graph_launches == 0 and host_driver.launches == 5 * len(cm.kernels)
    assert "capturing them failed: cuStreamBeginCapture failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" in cm.summary()


# -- symbolic sizes: kernels take the sizes, their grids computed per launch, a graph per size ----
BATCH = torch.export.Dim("batch", min=1, max=8)


@pytest.fixture(scope="module")
def symbolic_mlp():
    torch.manual_seed(3)
    model = MODELS["mlp"][0]().eval()
    return model, ember.compile(model, (torch.randn(2, 16),), dynamic_shapes=({0: BATCH},), target="cuda")


def test_symbolic_sizes_run_with_gpu_semantics_at_each_size():
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.LayerNorm(5)).eval()
    cm = ember.compile(model, (torch.randn(2, 3, 6),), dynamic_shapes=({1: torch.export.Dim("seq", max=16)},),
                       target=SIMULATED)
    for seq in (3, 7, 3):
        x = torch.randn(2, seq, 6)
        with torch.no_grad():
            np.testing.assert_allclose(cm(x).numpy(), model(x).numpy(), rtol=TOL, atol=TOL)


class CacheStep(torch.nn.Module):
    """A decode step of one attention head: the new position's key and value appended to a cache
    of symbolic length, the query attending to all of it; returns the output and the longer cache."""

    def __init__(self, d=8):
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x, keys, values):
        q, k, v = self.qkv(x).chunk(3, -1)
        keys, values = torch.cat([keys, k], 1), torch.cat([values, v], 1)
        scores = torch.softmax(q @ keys.transpose(1, 2) / 8 ** 0.5, -1)
        return self.out(scores @ values), keys, values


def test_a_kv_cache_decode_step_with_a_symbolic_cache_length_runs_step_after_step():
    torch.manual_seed(5)
    model = CacheStep().eval()
    past = torch.export.Dim("past", min=1, max=16)
    cache = torch.randn(1, 3, 8)
    cm = ember.compile(model, (torch.randn(1, 1, 8), cache, cache.clone()), dynamic_shapes=(None, {1: past}, {1: past}),
                       target=SIMULATED)
    keys, values = torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    for _ in range(3):  # past 3, 4, 5: each step's cache the previous step's output
        x = torch.randn(1, 1, 8)
        with torch.no_grad():
            expected = model(x, keys, values)
        got = cm(x, keys, values)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=TOL, atol=TOL)
        keys, values = got[1], got[2]


def test_symbolic_kernels_take_their_sizes_and_compute_their_grids(symbolic_mlp):
    _, cm = symbolic_mlp
    kernels = cm._entry.kernels.values()
    assert all(k.grid is None and k.func.size_vars for k in kernels)
    assert all("int64_t batch" in k.source for k in kernels)
    k = next(iter(kernels))
    assert k.grid_of([1]) == (1, 1, 1) and k.grid_of([8]) >= k.grid_of([1]) and k.grid_of([0]) == (0, 1, 1)
    with pytest.raises(ArgumentTypeError, match="has symbolic sizes"):
        k(np.ones((2, 16), np.float32), *[np.ones(1, np.float32)] * (len(k.func.params) - 1))


def test_symbolic_sizes_on_the_driver_path_capture_a_graph_per_size_and_keep_it(symbolic_mlp, host_driver):
    model, cm = symbolic_mlp
    on_stand_in(cm)
    rng = np.random.default_rng(5)

    def call(batch):
        x = rng.standard_normal((batch, 16), np.float32)
        with torch.no_grad():
            expected = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(cm(x), expected, rtol=TOL, atol=TOL)
        return cm._graphs.captures, host_driver.graph_launches

    assert call(3) == (0, 0)  # the first call: one by one
    assert call(3) == (1, 1)  # the same sizes again: captured, replayed
    assert call(5) == (1, 1) and "the sizes batch=5 are new" in cm.summary()  # new sizes: one by one
    assert call(5) == (2, 2)
    assert call(3) == (2, 3)  # the first size's graph again: the arena and slots reserved for batch <= 8
    assert "replayed as one CUDA graph (2 captured" in cm.summary()
    arena = cm._arena
    assert call(8) == (2, 3) and cm._arena == arena


def test_a_saved_cuda_model_loads_without_compiling_and_runs_at_each_size(symbolic_mlp, host_driver, tmp_path):
    model, cm = symbolic_mlp
    folder = cm.save(tmp_path / "mlp")
    loaded = ember.load(folder)
    assert type(loaded) is type(cm) and loaded.spec == cm.spec
    for name, k in loaded._entry.kernels.items():
        original = cm._entry.kernels[name]
        assert k.binary == original.binary and k.to_json() == original.to_json() and k.source == original.source
        k.func = original.func  # the stand-in interprets the loop IR, which a saved model does not keep
    rng = np.random.default_rng(6)
    for batch in (2, 7, 2):
        x = rng.standard_normal((batch, 16), np.float32)
        with torch.no_grad():
            np.testing.assert_allclose(loaded(x), model(torch.from_numpy(x)).numpy(), rtol=TOL, atol=TOL)
    text = (folder / "manifest.json").read_text()
    manifest = json.loads(text)
    manifest["kernel_launches"][0]["grid"]["symbolic"]["blockIdx.x"] = [["__import__('os').getpid() +", 1, 2]]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="is not a grid extent"):  # only ints, sizes and arithmetic
        ember.load(folder)
    (folder / "manifest.json").write_text(text)
    cubin = next((folder / "kernels").glob("*.cubin"))
    data = cubin.read_bytes()
    cubin.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])  # one bit flipped
    with pytest.raises(ArtifactError, match=f"{cubin.name}"):
        ember.load(folder)


def test_profile_times_each_kernel_between_events_on_the_stream(symbolic_mlp, host_driver):
    _, cm = symbolic_mlp
    on_stand_in(cm)
    x = np.random.default_rng(7).standard_normal((4, 16), np.float32)
    prof = cm.profile(x, repeat=3)  # the stand-in's events hold the host's times (kernels interpreted)
    assert [k.name for k in prof.kernels] == [k.name for k in cm.kernels]
    assert all(k.calls == 1 and k.median_us > 0 for k in prof.kernels)
    assert prof.total_us >= sum(k.median_us for k in prof.kernels) * 0.5 and prof.repeat == 3
    assert host_driver.graph_launches == 0 and cm._marks is None
    assert f"{prof.total_us:.1f} us per run (median of 3 profiled runs)" in cm.summary()


@needs_gpu
def test_on_the_gpu_symbolic_sizes_saved_and_profiled(symbolic_mlp, tmp_path):
    model, cm = symbolic_mlp
    on_stand_in(cm)  # (its device state may be a stand-in's from the tests above: dropped)
    rng = np.random.default_rng(8)
    for batch in (3, 3, 5, 5, 3):
        x = rng.standard_normal((batch, 16), np.float32)
        with torch.no_grad():
            expected = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(cm(x), expected, rtol=TOL, atol=TOL)  # copied into the input slots
    assert cm._graphs.captures == 2 and cm.graph_reason is None  # one graph a size, replayed for 3 again
    # (torch's caching allocator may give a new tensor the previous call's address: a graph in place)
    np.testing.assert_allclose(cm(torch.from_numpy(x).cuda()).cpu().numpy(), expected, rtol=TOL, atol=TOL)
    loaded = ember.load(cm.save(tmp_path / "mlp"))
    np.testing.assert_allclose(loaded(x), expected, rtol=TOL, atol=TOL)
    prof = loaded.profile(x, repeat=3)
    assert [k.name for k in prof.kernels] == [k.name for k in cm.kernels] and prof.total_us > 0
