"""The driver path of a CUDA model on a stand-in driver over host memory (stand_in_driver.py):
one arena and the weights uploaded once, arrays on the wrong device refused before any launch,
the launches captured as one CUDA graph from the second call (again on a new input address), and
one by one where graphs are off or their capture fails, the summary saying why."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_nvrtc
from model_cases import TOL
from stand_in_driver import DeviceArray, on_stand_in

from ember.errors import ArgumentTypeError, ShapeError

pytestmark = needs_nvrtc


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
    """Before any launch: at the first call, and after calls that replayed a graph."""
    cm = on_stand_in(on_gpu[1])
    with pytest.raises(ArgumentTypeError, match=r"is on cpu; model 'model' runs on cuda:0"):
        cm(torch.randn(2, 16))
    host_driver.ordinal_of_arrays = 1
    with pytest.raises(ArgumentTypeError, match="is on cuda:1"):
        cm(DeviceArray(np.ones((2, 16), np.float32), host_driver))
    with pytest.raises(ArgumentTypeError, match="has dtype float64"):
        cm(np.ones((2, 16)))
    assert host_driver.launches == 0
    host_driver.ordinal_of_arrays = 0
    x = DeviceArray(np.ones((2, 16), np.float32), host_driver)
    for _ in range(3):  # launched, captured, replayed: what the call needs at these sizes worked out
        cm(x)
    done = (host_driver.launches, host_driver.graph_launches)
    with pytest.raises(ShapeError, match="input 'input' dimension 0: expected 2, got 3"):
        cm(DeviceArray(np.ones((3, 16), np.float32), host_driver))
    with pytest.raises(ArgumentTypeError, match="has dtype float64"):
        cm(DeviceArray(np.ones((2, 16)), host_driver))
    assert (host_driver.launches, host_driver.graph_launches) == done


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
