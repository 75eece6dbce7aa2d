"""Seeing the result: cm.summary() (kernels in run order, their operators, times, memory plan),
cm.profile (one positive median per kernel, wall and CPU), cm.memory (the plan's peak and unplanned bytes)."""

import os

import numpy as np
import pytest

from ember.compiler import compile_graph
from ember.errors import ArtifactError
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.testing import random_array


def _model(n=16):
    """relu(relu(x @ w)) + x: the relu kernel runs twice."""
    g = Graph("summarized")
    x = g.add_input("x", TensorType((n, n)))
    h, = add_op(g, "matmul", [x, g.add_constant(random_array((n, n)), "w")])
    r, = add_op(g, "relu", add_op(g, "relu", [h]))
    y, = add_op(g, "add", [r, x])
    g.set_outputs([y])
    return compile_graph(g, opt_level=0)


def test_summary_lists_kernels_ops_and_memory():
    cm = _model()
    text = cm.summary()
    assert f"{len(cm.kernels)} kernels" in text
    for k in cm.kernels:
        assert k.name in text and " + ".join(k.ops) in text
    mem = cm.memory
    # three 16x16 float32 intermediates (1 KiB each) in one buffer: each relu writes over its input
    assert (mem.peak_bytes, mem.unplanned_bytes, mem.tensors) == (1024, 3072, 3)
    assert "workspace 1.0 KiB for 3 intermediate tensors (unplanned: 3.0 KiB" in text
    assert " us" not in text  # no profile yet


def test_profile_times_every_kernel():
    cm = _model()
    x = random_array((16, 16))
    prof = cm.profile(x, repeat=3)
    assert [k.name for k in prof.kernels] == [k.name for k in cm.kernels]
    assert [k.calls for k in prof.kernels] == [len(k.nodes) for k in cm.kernels]
    assert all(0 < k.p10_us <= k.median_us for k in prof.kernels) and prof.total_us > 0
    assert set(prof.times()) == {k.name for k in cm.kernels}
    assert cm.last_profile is prof
    text = cm.summary()
    assert "median of 3 profiled runs" in text and text.count(" us wall ") == len(cm.kernels)
    # the calling thread's CPU time: positive, and no more than the wall time of the threads the
    # kernel may run on (slack: the clock's own reading, a system call)
    threads = cm._num_threads or os.cpu_count()
    assert all(0 < k.cpu_us <= k.median_us * threads + 50 for k in prof.kernels)
    assert 0 < prof.cpu_total_us <= prof.total_us * threads + 50 * len(prof.kernels)
    assert all(f"{k.cpu_us:8.1f} us cpu" in text for k in prof.kernels)
    # profiling computes what a call computes
    expected = np.maximum(x @ cm.weights["w"], 0) + x
    np.testing.assert_allclose(cm(x), expected, rtol=1e-5, atol=1e-5)


def test_profile_checks_its_arguments():
    cm = _model()
    with pytest.raises(ValueError, match="repeat must be at least 1"):
        cm.profile(random_array((16, 16)), repeat=0)


def test_profile_refuses_a_library_without_its_call_table(monkeypatch):
    """A library built before the table of calls has a profiling entry that writes one clock per
    call into the buffer it is given, which would be sized for none: refused before the call."""
    import ember.runtime.summary as summary

    cm = _model()
    monkeypatch.setattr(summary, "call_symbols", lambda library: None)
    with pytest.raises(ArtifactError, match="no table of its calls .* compile it again"):
        cm.profile(random_array((16, 16)))


def test_memory_of_a_symbolic_model_needs_a_call():
    g = Graph("sym")
    x = g.add_input("x", TensorType(("n", 4)))
    y, = add_op(g, "relu", add_op(g, "neg", [x]))
    g.set_outputs([y])
    cm = compile_graph(g, opt_level=0)
    with pytest.raises(ValueError, match="the workspace depends on n; call the model first"):
        _ = cm.memory
    cm(random_array((8, 4)))
    assert cm.memory.peak_bytes == cm.memory.unplanned_bytes == 128  # 8 * 4 * 4 bytes
