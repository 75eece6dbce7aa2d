"""tensor_scatter (ember/ops/tensor_scatter.py), the key/value cache update, against its NumPy
reference compiled to C and on the interpreter: linear and circular (wrapping) windows, the
write indices left out, symbolic cache lengths; a linear window outside the cache against ONNX's
reference; the memory plan writing it over the cache; the errors of bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember.errors import IndexOutOfRangeError
from ember.graph import Graph, TensorType
from ember.lowering import partition
from ember.ops import OpTypeError, infer_types
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.plan_memory import kernel_graph
from ember.target import Target
from ember.testing import build_op, check_op, check_op_sizes

RNG = np.random.default_rng()
ON_GPU_INTERPRETER = Target("python", schedules="gpu")


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("shape, count, axis", [((3, 2, 10, 4), 3, -2), ((2, 9, 5), 4, 1), ((4, 3, 6), 6, 2)])
def test_tensor_scatter(mode, shape, count, axis):
    cache = RNG.uniform(-1, 1, shape).astype("float32")
    update_shape = list(shape)
    update_shape[axis] = count
    update = RNG.uniform(-1, 1, update_shape).astype("float32")
    length = shape[axis]
    # circular: windows that wrap past the end; linear: windows inside the cache
    high = length if mode == "circular" else length - count + 1
    starts = RNG.integers(0, high, shape[0]).astype("int64")
    attrs = {"axis": axis, "mode": mode}
    check_op("tensor_scatter", [cache, update, starts], attrs, rtol=0, atol=0, targets=("c", "python"))
    check_op("tensor_scatter", [cache, update], attrs, rtol=0, atol=0)  # from position 0


def test_tensor_scatter_wraps_and_symbolic_lengths():
    types = [TensorType((2, "past", 3), "float32"), TensorType((2, "new", 3), "float32"), TensorType((2,), "int64")]
    sets = []
    for past, new in ((8, 1), (5, 3), (16, 16)):
        sets.append([RNG.uniform(-1, 1, (2, past, 3)).astype("float32"), RNG.uniform(-1, 1, (2, new, 3))
                     .astype("float32"), np.array([past - 1, 2 * past + 1], "int64")])  # 2 past + 1: past the end
    check_op_sizes("tensor_scatter", types, {"axis": 1, "mode": "circular"}, sets, rtol=0, atol=0)


@given(count=st.integers(1, 14), starts=st.lists(st.integers(-20, 20), min_size=2, max_size=2))
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_a_circular_update_longer_than_its_cache_keeps_its_last_rows(count, starts):
    """A symbolic update of more rows than the cache (a prompt longer than a sliding window): each
    position wraps around several times, and the last row written there is kept (ONNX's reference,
    its rows in order). The CPU's rows stored in parallel raced for such a position; the GPU's
    choice per element took the first row (found on the GPU interpreter)."""
    types = [TensorType((2, 5, 3), "float32"), TensorType((2, "new", 3), "float32"), TensorType((2,), "int64")]
    inputs = [RNG.uniform(-1, 1, (2, 5, 3)).astype("float32"), RNG.uniform(-1, 1, (2, count, 3)).astype("float32"),
              np.array(starts, "int64")]
    check_op_sizes("tensor_scatter", types, {"axis": 1, "mode": "circular"}, [inputs], rtol=0, atol=0,
                   targets=("c", "python", ON_GPU_INTERPRETER))


def onnx_reference(cache, update, starts, mode):
    """ONNX's reference TensorScatter (axis 1), or the exception it raises."""
    from onnx.reference.ops.op_tensor_scatter import TensorScatter

    try:
        return TensorScatter._run(None, cache, update, starts, mode=mode, axis=1)[0]
    except (IndexError, ValueError) as e:
        return e


@given(length=st.integers(1, 6), count=st.integers(1, 9), starts=st.lists(st.integers(-10, 10), min_size=2, max_size=2))
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_a_linear_window_outside_the_cache_raises(length, count, starts):
    """Linear, the positions index the cache's axis as ONNX's reference indexes it (negative: from
    the end); one outside it, or an update longer than the cache (symbolic lengths), raises
    IndexOutOfRangeError on the CPU, the interpreter and the GPU's choice per element (which checks
    the window: no element has a row to report), where the rows outside used to be dropped."""
    types = [TensorType((2, "past", 3), "float32"), TensorType((2, "new", 3), "float32"), TensorType((2,), "int64")]
    inputs = [RNG.uniform(-1, 1, (2, length, 3)).astype("float32"),
              RNG.uniform(-1, 1, (2, count, 3)).astype("float32"), np.array(starts, "int64")]
    want = onnx_reference(*inputs, "linear")
    for target in ("c", "python", ON_GPU_INTERPRETER):
        kernel = build_op("tensor_scatter", types, {"axis": 1}, target)
        if isinstance(want, Exception):
            with pytest.raises(IndexOutOfRangeError, match=f"out of range for an axis of size {length} "):
                kernel.run(*inputs)
        else:
            np.testing.assert_array_equal(kernel.run(*inputs)[0], want, err_msg=f"{target}")
    if isinstance(want, Exception):
        with pytest.raises(IndexOutOfRangeError):
            check_op_sizes("tensor_scatter", types, {"axis": 1}, [inputs], rtol=0, atol=0)


def test_a_compiled_model_names_the_scatter_of_a_window_outside_the_cache():
    g = Graph("decode_step")
    cache, new = g.add_input("cache", TensorType((2, 8, 4))), g.add_input("new", TensorType((2, 2, 4)))
    at = g.add_input("at", TensorType((2,), "int64"))
    g.set_outputs(add_op(g, "tensor_scatter", [cache, new, at], {"axis": 1}))
    cm = ember.compile(g)
    inputs = [RNG.uniform(-1, 1, (2, 8, 4)).astype("float32"), RNG.uniform(-1, 1, (2, 2, 4)).astype("float32")]
    np.testing.assert_array_equal(cm(*inputs, np.array([6, -2])), onnx_reference(*inputs, np.array([6, -2]), "linear"))
    with pytest.raises(IndexOutOfRangeError, match=r"index 8 is out of range for an axis of size 8.*tensor_scatter"):
        cm(*inputs, np.array([0, 7]))


def test_the_plan_writes_the_update_over_the_cache():
    """A cache made by a kernel before it and read by nothing after: the update's kernel writes
    its output over the cache's bytes (no second cache-sized buffer)."""
    g = Graph("decode_step")
    x, new = g.add_input("x", TensorType((2, 64, 8))), g.add_input("new", TensorType((2, 1, 8)))
    at = g.add_input("at", TensorType((2,), "int64"))
    (cache,) = add_op(g, "cumsum", [x], {"axis": 1})
    (present,) = add_op(g, "tensor_scatter", [cache, new, at], {"axis": 1})
    g.set_outputs(add_op(g, "softmax", [present], {"axis": 1}))
    steps = kernel_graph(partition(g, 2))
    [scatter] = [s for s in steps.steps if "tensor_scatter" in s.group.ops]
    assert scatter.in_place == ((0, scatter.group.inputs.index(cache)),)
    cm = ember.compile(g)
    inputs = [RNG.uniform(-1, 1, (2, 64, 8)).astype("float32"), RNG.uniform(-1, 1, (2, 1, 8)).astype("float32"),
              np.array([5, 63], "int64")]
    np.testing.assert_allclose(cm(*inputs), evaluate(g, *inputs)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("types, attrs, match", [
    ([(2, 4, 3), (2, 5, 3)], {}, "do not fit in the cache's 4"),
    ([(2, 4, 3), (2, 2, 2)], {}, "the update's dimension 2 is 2, the cache's 3"),
    ([(2, 4, 3), (2, 2, 3)], {"axis": 0}, "axis 0 is the batch axis"),
    ([(2, 4, 3), (2, 2, 3)], {"mode": "wrap"}, "mode must be one of"),
    ([(2, 4, 3), (2, 2, 3), (3,)], {}, r"write_indices must be integers, one per batch entry \(2\)"),
])
def test_errors(types, attrs, match):
    in_types = [TensorType(s, "int64" if k == 2 else "float32") for k, s in enumerate(types)]
    with pytest.raises(OpTypeError, match=match):
        infer_types("tensor_scatter", in_types, attrs)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("start", [2**63, 2**63 + 3, 2**64 - 1])
def test_uint64_write_indices_past_int64_as_the_kernel_takes_them(mode, start):
    """A uint64 write index of 2**63 or more is int64 to the kernel (wrapped negative): the
    reference takes it so too, where it raised NumPy's OverflowError; linear, the same
    IndexOutOfRangeError, naming the same index, as the compiled model (2**64 - 1 is -1: in range)."""
    g = Graph("decode_step")
    cache, new = g.add_input("cache", TensorType((2, 6, 3))), g.add_input("new", TensorType((2, 2, 3)))
    at = g.add_input("at", TensorType((2,), "uint64"))
    g.set_outputs(add_op(g, "tensor_scatter", [cache, new, at], {"axis": 1, "mode": mode}))
    cm = ember.compile(g)
    inputs = [RNG.uniform(-1, 1, (2, 6, 3)).astype("float32"), RNG.uniform(-1, 1, (2, 2, 3)).astype("float32"),
              np.array([int(RNG.integers(0, 5)), start], np.uint64)]
    wrapped = start - 2**64 if start >= 2**63 else start
    if mode == "linear" and not -6 <= wrapped <= 4:
        with pytest.raises(IndexOutOfRangeError) as reference:
            evaluate(g, *inputs)
        with pytest.raises(IndexOutOfRangeError) as compiled:
            cm(*inputs)
        assert reference.value.index == compiled.value.index == wrapped and reference.value.size == 6
        assert f"tensor_scatter: index {wrapped} is out of range for an axis of size 6" in str(reference.value)
    else:
        np.testing.assert_array_equal(cm(*inputs), evaluate(g, *inputs)[0])
