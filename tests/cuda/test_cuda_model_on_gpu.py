"""Models for target "cuda" on a GPU, through the driver (each test skipped with the reason where
there is none): torch CUDA tensors in place, NumPy copied, CUDA graphs replayed, symbolic sizes
saved and profiled; without a GPU, a call is a DeviceError (the compile is not)."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_gpu, needs_nvrtc
from model_cases import TOL, SmallCNN
from stand_in_driver import on_stand_in

import ember
from ember.errors import DeviceError

pytestmark = needs_nvrtc


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
def test_on_the_gpu_a_cache_update_outside_the_cache_is_raised():
    """tensor_scatter's linear window checked by every element of the GPU's choice per element
    (ember.ops.tensor_scatter.linear_start): a write index whose rows pass the cache's end raises,
    where the rows were dropped; a window inside it (a negative index from the end) is right."""
    from ember.graph import Graph, TensorType
    from ember.ops.evaluate import evaluate
    from ember.ops.nodes import add_op

    g = Graph("decode_step")
    cache, new = g.add_input("cache", TensorType((2, 8, 4))), g.add_input("new", TensorType((2, 2, 4)))
    at = g.add_input("at", TensorType((2,), "int64"))
    g.set_outputs(add_op(g, "tensor_scatter", [cache, new, at], {"axis": 1}))
    cm = ember.compile(g, target="cuda")
    rng = np.random.default_rng(5)
    inputs = [rng.uniform(-1, 1, (2, 8, 4)).astype("float32"), rng.uniform(-1, 1, (2, 2, 4)).astype("float32")]
    for good in ([6, -2], [0, 3]):
        np.testing.assert_array_equal(cm(*inputs, np.array(good)), evaluate(g, *inputs, np.array(good))[0])
    with pytest.raises(ember.errors.IndexOutOfRangeError, match="index 8 is out of range for an axis of size 8"):
        cm(*inputs, np.array([0, 7]))
    np.testing.assert_array_equal(cm(*inputs, np.array([1, 2])), evaluate(g, *inputs, np.array([1, 2]))[0])


@needs_gpu
def test_on_the_gpu_a_cpu_tensor_is_refused_before_any_launch(on_gpu):
    _, cm = on_gpu
    with pytest.raises(ember.errors.ArgumentTypeError, match=r"is on cpu.*to\('cuda:0'\)"):
        cm(torch.randn(2, 16))


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
