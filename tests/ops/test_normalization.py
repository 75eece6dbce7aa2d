"""Normalizations (ember/ops/normalization.py) against NumPy and torch.nn.functional: softmax and
log_softmax over every axis (stable for large inputs), layer_norm and rms_norm over one or two
trailing dims with and without affine parameters, group_norm, instance_norm, batch_norm; float16,
symbolic dims, the row schedules, and the errors of bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as F

import ember
from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.schedules.apply import node_kernel
from ember.testing import check_op, check_op_sizes

RNG = np.random.default_rng()


def rand(*shape, dtype="float32", low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape).astype(dtype)


@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
@pytest.mark.parametrize("name, torch_fn", [("softmax", F.softmax), ("log_softmax", F.log_softmax)])
def test_softmax(name, torch_fn, axis):
    x = rand(3, 5, 37)
    check_op(name, [x], {"axis": axis}, rtol=1e-5, atol=1e-6, torch_fn=lambda t: torch_fn(t, axis))


@pytest.mark.parametrize("name, torch_fn", [("softmax", F.softmax), ("log_softmax", F.log_softmax)])
def test_softmax_is_stable_for_large_inputs(name, torch_fn):
    """exp(1000) overflows float32: the row's max is subtracted first, and log_softmax never takes
    the log of an underflowed quotient."""
    x = rand(4, 64, low=-1000, high=1000)
    out = check_op(name, [x], None, rtol=1e-5, atol=1e-5, torch_fn=lambda t: torch_fn(t, -1))[0]
    assert np.all(np.isfinite(out))


def test_softmax_interpreter_and_float16():
    x = rand(3, 4, 9)
    check_op("softmax", [x], {"axis": 1}, rtol=1e-5, atol=1e-6, targets=("c", "python"))
    check_op("log_softmax", [x], None, rtol=1e-5, atol=1e-6, targets=("c", "python"))
    x16 = rand(6, 100, dtype="float16", low=-8, high=8)
    check_op("softmax", [x16], None, rtol=2e-3, atol=1e-4, torch_fn=lambda t: F.softmax(t.float(), -1))
    check_op("log_softmax", [x16], None, rtol=2e-3, atol=2e-3, torch_fn=lambda t: F.log_softmax(t.float(), -1))


@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("shape, nd", [((4, 7, 48), 1), ((3, 37), 1), ((2, 5, 12), 2)])
def test_layer_norm(shape, nd, affine):
    x = rand(*shape, low=-3, high=5)
    norm = shape[len(shape) - nd:]
    params = {"none": [], "weight": [rand(*norm)], "both": [rand(*norm), rand(*norm)]}[affine]
    check_op("layer_norm", [x, *params], {"normalized_ndim": nd}, rtol=1e-4, atol=1e-5,
             torch_fn=lambda t, *p: F.layer_norm(t, norm, *p))


@pytest.mark.parametrize("shape, nd, weight", [((4, 7, 48), 1, True), ((3, 37), 1, False), ((2, 5, 12), 2, True)])
def test_rms_norm(shape, nd, weight):
    x = rand(*shape)
    norm = shape[len(shape) - nd:]
    params = [rand(*norm)] if weight else []
    check_op("rms_norm", [x, *params], {"normalized_ndim": nd, "eps": 1e-6}, rtol=1e-4, atol=1e-5,
             torch_fn=lambda t, *p: F.rms_norm(t, norm, *p, eps=1e-6))


def test_layer_norm_is_stable_for_a_large_mean():
    x = (500 + rand(8, 256)).astype("float32")
    check_op("layer_norm", [x], {"eps": 1e-5}, rtol=1e-3, atol=2e-3, torch_fn=lambda t: F.layer_norm(t, (256,)))


def test_layer_norm_interpreter_and_float16():
    x, w, b = rand(3, 10), rand(10), rand(10)
    check_op("layer_norm", [x, w, b], None, rtol=1e-4, atol=1e-5, targets=("c", "python"))
    check_op("rms_norm", [x, w], None, rtol=1e-4, atol=1e-5, targets=("c", "python"))
    half = [t.astype("float16") for t in (rand(4, 96), rand(96), rand(96))]
    check_op("layer_norm", half, None, rtol=3e-3, atol=5e-3,
             torch_fn=lambda t, w, b: F.layer_norm(t.float(), (96,), w.float(), b.float()))


@pytest.mark.parametrize("shape, groups", [((2, 6, 5, 7), 3), ((3, 8, 16), 2), ((2, 4, 3, 3), 4), ((4, 6), 3)])
def test_group_norm(shape, groups):
    """A group of (4, 6) holds two values; when they are close, its deviations are as small as the
    mean's rounding (half an ulp of x: 1.2e-7 near 3), which the division by sqrt(eps) = 3.2e-3
    makes up to 4e-5 of the output, whatever order the sum is taken in: hence atol 1e-4."""
    x = rand(*shape, low=-1, high=3)
    w, b = rand(shape[1]), rand(shape[1])
    check_op("group_norm", [x, w, b], {"num_groups": groups}, rtol=1e-4, atol=1e-4,
             torch_fn=lambda t, w, b: F.group_norm(t, groups, w, b))
    check_op("group_norm", [x], {"num_groups": groups, "eps": 1e-3}, rtol=1e-4, atol=1e-5,
             torch_fn=lambda t: F.group_norm(t, groups, eps=1e-3))


@pytest.mark.parametrize("shape", [(2, 6, 5, 7), (3, 4, 40)])
def test_instance_norm(shape):
    x = rand(*shape, low=-1, high=3)
    w, b = rand(shape[1]), rand(shape[1])
    check_op("instance_norm", [x, w, b], None, rtol=1e-4, atol=1e-5,
             torch_fn=lambda t, w, b: F.instance_norm(t, weight=w, bias=b))
    check_op("instance_norm", [x], {"eps": 1e-3}, rtol=1e-4, atol=1e-5, torch_fn=lambda t: F.instance_norm(t, eps=1e-3))


@pytest.mark.parametrize("shape", [(2, 6, 5, 8), (4, 3), (2, 5, 17)])
def test_batch_norm(shape):
    c = shape[1]
    x, mean, var, w, b = rand(*shape), rand(c), rand(c, low=0.1, high=2), rand(c), rand(c)
    check_op("batch_norm", [x, mean, var, w, b], {"eps": 1e-3}, rtol=1e-5, atol=1e-5,
             torch_fn=lambda t, m, v, w, b: F.batch_norm(t, m, v, w, b, eps=1e-3))


def test_channel_norms_interpreter_and_float16():
    x, w, b = rand(2, 4, 3, 5), rand(4), rand(4)
    mean, var = rand(4), rand(4, low=0.1, high=2)
    check_op("group_norm", [x, w, b], {"num_groups": 2}, rtol=1e-4, atol=1e-5, targets=("c", "python"))
    check_op("instance_norm", [x, w, b], None, rtol=1e-4, atol=1e-5, targets=("c", "python"))
    check_op("batch_norm", [x, mean, var, w, b], None, rtol=1e-5, atol=1e-5, targets=("c", "python"))
    half = [t.astype("float16") for t in (rand(2, 8, 6, 6), rand(8), rand(8))]
    check_op("group_norm", half, {"num_groups": 4}, rtol=3e-3, atol=5e-3)
    check_op("instance_norm", half, None, rtol=3e-3, atol=5e-3)


def test_symbolic_batch_one_build_two_sizes():
    sets = [[rand(n, 5, 24)] for n in (2, 3)]
    check_op_sizes("softmax", [TensorType(("batch", 5, 24))], None, sets, rtol=1e-5, atol=1e-6,
                   torch_fn=lambda t: F.softmax(t, -1))
    ln_sets = [[*s, rand(24), rand(24)] for s in sets]
    check_op_sizes("layer_norm", [TensorType(("batch", 5, 24)), TensorType((24,)), TensorType((24,))], None,
                   ln_sets, rtol=1e-4, atol=1e-5, torch_fn=lambda t, w, b: F.layer_norm(t, (24,), w, b))
    gn_sets = [[rand(n, 6, 4, 4)] for n in (1, 3)]
    check_op_sizes("group_norm", [TensorType(("batch", 6, 4, 4))], {"num_groups": 2}, gn_sets, rtol=1e-4,
                   atol=1e-5, torch_fn=lambda t: F.group_norm(t, 2))


def test_rows_with_a_guarded_last_vector():
    """Rows that vector lanes do not divide (wav2vec2's GroupNorm over 3199 samples a channel):
    the reductions and the output in vectors, the last one of a row guarded."""
    check_op("softmax", [rand(3, 101)], None, rtol=1e-5, atol=1e-6, torch_fn=lambda t: F.softmax(t, -1))
    x = rand(2, 4, 131, low=-3.0, high=5.0)
    for groups in (4, 2):
        check_op("group_norm", [x, rand(4), rand(4)], {"num_groups": groups}, rtol=1e-4, atol=1e-5,
                 torch_fn=lambda t, w, b, groups=groups: F.group_norm(t, groups, w, b))
    assert "ramp(" in lowered("group_norm", [TensorType((1, 4, 131))], {"num_groups": 4})


def test_symbolic_normalized_dim():
    """Rows of symbolic length: nothing to vectorize statically, still one kernel for all sizes."""
    sets = [[rand(3, n)] for n in (5, 70)]
    check_op_sizes("softmax", [TensorType((3, "n"))], None, sets, rtol=1e-5, atol=1e-6)
    check_op_sizes("rms_norm", [TensorType((3, "n"))], None, sets, rtol=1e-4, atol=1e-5)


def lowered(name, types, attrs=None) -> str:
    bound, out_types = infer_types(name, types, attrs)
    return str(ember.lower(*node_kernel(name, types, bound, out_types)))


@pytest.mark.parametrize("name, types, attrs, rows, vectors", [
    ("softmax", [TensorType((8, 96))], None, "parallel(8)", True),
    ("softmax", [TensorType((8, 100))], None, "parallel(8)", True),  # 100: the last vector guarded
    ("softmax", [TensorType((8, 50))], None, "parallel(8)", False),  # no lanes divide 50, under 4 vectors
    ("log_softmax", [TensorType((2, 16, 4, 5))], {"axis": 1}, "parallel(40)", False),  # strided rows
    ("layer_norm", [TensorType((8, 64)), TensorType((64,)), TensorType((64,))], None, "parallel(8)", True),
    ("rms_norm", [TensorType((6, 3, 32))], {"normalized_ndim": 2}, "parallel(6)", True),
    ("instance_norm", [TensorType((2, 6, 4, 8))], None, "parallel(12)", True),
    ("group_norm", [TensorType((2, 6, 4, 4))], {"num_groups": 3}, "parallel(6)", True),
])
def test_row_schedules(name, types, attrs, rows, vectors):
    """Rows in parallel, each row's statistics computed inside the row's iteration; rows whose
    static length vector lanes divide are vectorized, their reductions too (through partial
    sums per lane: `_rf` buffers)."""
    text = lowered(name, types, attrs)
    head, sep, body = text.partition(rows + ":")
    assert sep and "alloc" in body and "alloc" not in head, text
    assert ("ramp(" in body and "_rf = alloc" in body) == vectors, text


@pytest.mark.parametrize("name, types, attrs, match", [
    ("softmax", [TensorType((2, 3), "int32")], None, "softmax needs a floating-point input, got int32"),
    ("log_softmax", [TensorType((2, 3))], {"axis": 2}, "log_softmax: axis 2 is out of range for rank 2"),
    ("softmax", [TensorType((2, 3))], {"axis": None}, "softmax: axis must be an int"),
    ("layer_norm", [TensorType((2, 3)), TensorType((2,))], None,
     r"layer_norm: weight has shape \(2,\); it must be \(3,\) \(the last 1 dims of the input\)"),
    ("layer_norm", [TensorType((2, 3)), TensorType((3,)), TensorType((3,), "float16")], None,
     "layer_norm: inputs have different dtypes"),
    ("layer_norm", [TensorType((2, 3))], {"normalized_ndim": 3},
     "layer_norm: normalized_ndim must be an int from 1 to the input's rank 2, got 3"),
    ("rms_norm", [TensorType((2, 3))], {"eps": -1.0}, "rms_norm: eps must be a non-negative number"),
    ("rms_norm", [TensorType((2, 3)), TensorType((3,)), TensorType((3,))], None, "rms_norm takes 1 to 2 inputs"),
    ("group_norm", [TensorType((2, 6, 4))], None, "group_norm: attribute 'num_groups' is required"),
    ("group_norm", [TensorType((2, 6, 4))], {"num_groups": 4}, "group_norm: 6 channels do not split into 4 groups"),
    ("group_norm", [TensorType((2, "c", 4))], {"num_groups": 2}, "group_norm: the channel dim must be static"),
    ("group_norm", [TensorType((6,))], {"num_groups": 2}, r"group_norm needs an input of rank 2 or more \(N, C"),
    ("instance_norm", [TensorType((2, 6, 4)), TensorType((4,))], None,
     r"instance_norm: weight has shape \(4,\); it must be \(6,\) \(one per channel\)"),
    ("batch_norm", [TensorType((2, 6, 4))] + [TensorType((6,))] * 3, None, "batch_norm takes 5 inputs, got 4"),
    ("batch_norm", [TensorType((2, 6, 4)), TensorType((6,)), TensorType((5,)), TensorType((6,)), TensorType((6,))],
     None, r"batch_norm: var has shape \(5,\); it must be \(6,\)"),
    ("batch_norm", [TensorType((2, 6), "int32")] + [TensorType((6,), "int32")] * 4, None,
     "batch_norm needs a floating-point input"),
])
def test_errors_name_the_op_and_the_problem(name, types, attrs, match):
    with pytest.raises(OpTypeError, match=match):
        infer_types(name, types, attrs)
