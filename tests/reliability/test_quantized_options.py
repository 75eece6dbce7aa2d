"""The options of weight-only and int8 quantization used wrongly: ember.compile's weights,
group_size and zero_points, and ember.quantize's method, percentile, flags, calibration data and
target. Each bad value is an EmberError naming the argument and what is accepted, raised before
anything compiles; calibration data holding NaN or infinities is refused (a range over them quantized
every value to one code); a calibration range of zero width gets ONNX Runtime's scale of 1, not
0 or NaN; torch.export's size bounds hold on an int8 model as on ember.compile's; weights the
int4 groups do not divide stay float32 with a warning naming them (as llama.cpp's quantizer
says which tensors fall back); a weight to quantize holding a NaN or an infinity is named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.accel import vta
from ember.errors import ArgumentTypeError, CompileError, ConfigError, ShapeError
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.quantization.calibrate import activation_params

RNG = np.random.default_rng()


@pytest.fixture(scope="module")
def linear():
    torch.manual_seed(int(RNG.integers(1 << 31)))
    return torch.nn.Linear(64, 8).eval(), torch.from_numpy(RNG.standard_normal((4, 64)).astype(np.float32))


@pytest.mark.parametrize("options, says", [
    ({"weights": "int3"}, r"weights must be one of \('int8', 'int4'\) or None, got 'int3'"),
    ({"weights": "int4", "group_size": 48}, r"group_size must be one of \(32, 64, 128\) for int4 weights, got 48"),
    ({"weights": "int4", "group_size": 0}, "got 0"),
    ({"weights": "int4", "group_size": 32.0}, "got 32.0"),
    ({"weights": "int4", "zero_points": "yes"}, "zero_points must be True or False, got 'yes'"),
    ({"precision": "fp8"}, r"precision must be one of \['bf16', 'fp32'\] for target 'c', got 'fp8'"),
    ({"kv_cache": "int4"}, r"kv_cache must be one of \['bf16', 'float32', 'int8'\], got 'int4'"),
    ({"weights": {"abc": 1}}, "weights given as a mapping hold QuantizedWeights by digest .* got a value of type int"),
    # int4's options with other weights, dropped before (the default 128 given is refused too)
    ({"group_size": 32}, r"group_size is for int4 weights \(weights='int4'\); weights=None leaves the weights float32"),
    ({"zero_points": True}, r"zero_points are for int4 weights \(weights='int4'\); weights=None leaves"),
    ({"weights": "int8", "group_size": 128},
     "group_size is for int4 weights .*; int8 weights are symmetric per output channel"),
    ({"weights": "int8", "group_size": 32, "zero_points": True}, "group_size and zero_points are for int4 weights"),
    ({"weights": {}, "group_size": 64}, "group_size is for int4 weights .*; weights given quantized .* own codes"),
    ({"weights": "int3", "group_size": 64}, r"weights must be one of \('int8', 'int4'\) or None, got 'int3'"),
])
def test_compile_options_are_named(options, says):
    g = Graph("relu")
    g.set_outputs(add_op(g, "relu", [g.add_input("x", TensorType((4, 64)))]))
    with pytest.raises(ConfigError, match=says):
        ember.compile(g, **options)


@pytest.mark.parametrize("options, error, says", [
    ({"dynamic": "no"}, ArgumentTypeError, "dynamic must be True or False, got 'no'"),
    ({"per_channel": "no", "calibration_data": "batches"}, ArgumentTypeError, "per_channel must be True or False"),
    ({"dynamic": True, "calibration_data": "batches"}, ArgumentTypeError, "dynamic=True .* takes no calibration_data"),
    ({"method": "percentile", "percentile": 150, "calibration_data": "batches"}, ConfigError,
     r"percentile must be a number in \(50, 100\]"),
    ({"method": "mse", "calibration_data": "batches"}, ArgumentTypeError, "method must be one of"),
    ({"weights": "int4", "method": "entropy"}, ArgumentTypeError, "weights= quantizes the weights only"),
    ({"dynamic": True, "target": "cuda"}, ConfigError, "target 'cuda' has no int8 product kernels yet"),
    # options that mean something only with another, dropped before
    ({"offload_tiles": {}, "calibration_data": "batches"}, ArgumentTypeError,
     "offload_tiles are tiles of an accelerator's GEMM shapes: they need offload="),
    ({"percentile": 99.9, "calibration_data": "batches"}, ArgumentTypeError,
     "percentile is for method='percentile', got method='minmax'"),
    ({"dynamic": True, "method": "entropy"}, ArgumentTypeError, "it takes no method, got method='entropy'"),
    ({"weights": "int8", "nhwc": False}, ArgumentTypeError, "weights= quantizes the weights only .* nhwc"),
    ({"nhwc": True, "offload": "vta", "calibration_data": "batches"}, ArgumentTypeError,
     "nhwc=True with offload: an offloaded model's convolutions keep NCHW"),
])
def test_quantize_options_are_named(linear, options, error, says):
    model, x = linear
    if options.get("calibration_data") == "batches":
        options = {**options, "calibration_data": [x]}
    if options.get("offload") == "vta":
        options = {**options, "offload": vta}
    with pytest.raises(error, match=says):
        ember.quantize(model, (x,), progress=False, **options)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_calibration_with_nan_or_infinity_is_refused(linear, bad):
    model, x = linear
    batch = x.clone()
    batch[1, 5] = bad
    with pytest.raises(ConfigError, match=r"calibration batch 1: 'input' holds 1 NaN or infinite value\(s\) of 256"):
        ember.quantize(model, (x,), [x, batch], progress=False)


def test_a_range_of_zero_width_gets_scale_one():
    # ONNX Runtime's compute_scale_zp: rmin = min(rmin, 0), rmax = max(rmax, 0); scale 1 and zero
    # point 0 where they meet; ember widens to hold 0 the same way
    assert activation_params(0.0, 0.0) == (np.float32(1.0), 0)
    c = float(RNG.uniform(0.5, 2))
    scale, zero = activation_params(0.0, c)
    assert (scale, zero) == (np.float32(c / 255), 0)
    scale, zero = activation_params(-c, 0.0)
    assert (scale, zero) == (np.float32(c / 255), 255)


def test_constant_calibration_runs_the_constant_input_back(linear):
    """Calibrated on one constant batch, the int8 model gives the float model's output on it (the
    input's one value is a code exactly; only the weights' rounding is left)."""
    model, x = linear
    c = float(RNG.uniform(-2, -0.5))
    constant = torch.full((4, 64), c)
    q = ember.quantize(model, (x,), [constant], progress=False)
    with torch.no_grad():
        want = model(constant).numpy()
    np.testing.assert_allclose(q(constant.numpy()), want, rtol=0, atol=0.02 * np.abs(want).max())


def test_quantize_keeps_the_sizes_bounds(linear):
    model, x = linear
    n = torch.export.Dim("n", min=1, max=8)
    q = ember.quantize(model, (x,), dynamic=True, dynamic_shapes=({0: n},))
    with pytest.raises(ShapeError, match=r"binds 'n' outside the range \[1, 8\]"):
        q(RNG.standard_normal((9, 64)).astype(np.float32))
    x3 = torch.from_numpy(RNG.standard_normal((3, 64)).astype(np.float32))
    with torch.no_grad():
        want = model(x3).numpy()
    np.testing.assert_allclose(q(x3.numpy()), want, rtol=0, atol=0.03 * np.abs(want).max())


def test_int4_weights_the_groups_do_not_divide_warn(linear):
    model, x = linear  # K = 64: groups of 128 do not divide it
    with pytest.warns(RuntimeWarning, match=r"group_size=128: 1 weight\(s\) keep float32, their K not a multiple"):
        cm = ember.compile(model, (x,), weights="int4", group_size=128)
    with torch.no_grad():
        np.testing.assert_allclose(cm(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [{"weights": "int8"}, {"weights": "int4", "group_size": 32},
                                     {"weights": "int4", "group_size": 32, "zero_points": True}])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_weight_holding_nan_or_infinity_is_named(options, bad):
    """A weight to quantize holding a NaN or an infinity: a CompileError naming it and where, where
    int8's codes lost it (that column's outputs finite, float32's NaN); one the int4 groups do not
    divide stays float32 and keeps it."""
    model = torch.nn.Linear(64, 40).eval()
    with torch.no_grad():
        model.weight[7, 33] = bad
    x = torch.from_numpy(RNG.standard_normal((4, 64)).astype(np.float32))
    with pytest.raises(CompileError, match=rf"weight weight.T holds {bad} \(row 33, column 7 of its \(K, N\) = "
                                           rf"\(64, 40\)\), which its codes cannot hold"):
        ember.compile(model, (x,), **options)
    with pytest.warns(RuntimeWarning, match="keep float32"):
        cm = ember.compile(model, (x,), weights="int4", group_size=128)
    with torch.no_grad():
        np.testing.assert_allclose(cm(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("data, says", [
    (lambda x: x, "calibration_data is an iterable of batches .* got Tensor; one batch x is \\[x\\]"),
    (lambda x: 5, "calibration_data is an iterable of batches .* got int"),
    (lambda x: [(x, torch.arange(4))], r"calibration batch 0 holds 2 array\(s\); the model takes 1 input\(s\)"),
    (lambda x: [x, {"input": x}], "calibration batch 1: input 'input' has dtype object, expected float32"),
    (lambda x: [x.double()], "calibration batch 0: input 'input' has dtype float64, expected float32"),
])
def test_calibration_data_of_another_form_is_named(linear, data, says):
    """(a DataLoader's (x, label) pairs and ONNX Runtime's dict batches are the likely mistakes;
    a float64 batch was converted silently where it fed the observers directly)"""
    model, x = linear
    with pytest.raises(ArgumentTypeError, match=says):
        ember.quantize(model, (x,), data(x), progress=False)


def test_a_misspelt_option_is_named_before_the_import(linear):
    model, x = linear
    with pytest.raises(ArgumentTypeError, match="ember.compile: unknown option\\(s\\) 'precison'; the options are .*"
                                                "precision"):
        ember.compile(model, (x,), precison="bf16")
    with pytest.raises(ArgumentTypeError, match="ember.quantize: unknown option\\(s\\) 'per_chanel'; .*per_channel"):
        ember.quantize(model, (x,), [x], per_chanel=False)


def test_torch_compile_options_the_backend_does_not_take_are_named():
    """(they were ignored: options={"precision": "bf16"} ran in float32)"""
    model = torch.nn.Linear(8, 4).eval()
    compiled = torch.compile(model, backend="ember", options={"precision": "bf16"})
    with pytest.raises(Exception) as info, torch.no_grad():
        compiled(torch.from_numpy(RNG.standard_normal((2, 8)).astype(np.float32)))
    inner = getattr(info.value, "inner_exception", info.value)
    assert isinstance(inner, ConfigError) and "unknown option(s) 'precision'; the backend takes 'freeze'" in str(inner)
