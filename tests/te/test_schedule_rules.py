"""The schedule rules that default schedules and tuner sketches share (ember/schedules/rules.py):
which stages inline_intermediates inlines, the loops parallel_vectorize makes in either form,
and kernels scheduled with them computing what NumPy computes. And te_shape: size variables
shared by name inside one kernel, nothing kept between kernels."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.graph.core import TensorType
from ember.ops.common import te_shape
from ember.schedules.apply import placeholders
from ember.schedules.cpu.default import vector_loops
from ember.schedules.rules import inline_intermediates, parallel_vectorize
from ember.testing import random_array

LANES = vector_loops(16)  # the default schedules' vector loops for AVX-512's 16 float lanes


def chain(m: int = 32, n: int = 48):
    """A (m, n) -> B = 2A -> C = B + 1 -> D = exp(C): B and C intermediates, D the output."""
    a = te.placeholder((m, n), "float32", name="A")
    b = te.compute((m, n), lambda i, j: a[i, j] * 2.0, name="B")
    c = te.compute((m, n), lambda i, j: b[i, j] + 1.0, name="C")
    d = te.compute((m, n), lambda i, j: te.exp(c[i, j]), name="D")
    return a, d


def blocks(s) -> list[str]:
    return [r.block.name for r in s.sch.all_realizes() if r.block.name != "root"]


def loops(s, t) -> list[tuple[str, int]]:
    return [(f.kind, int(f.extent.value)) for f in s.sch.loops_of(s[t].block)]


def test_inline_intermediates_keeps_outputs_and_honours_among_and_where():
    a, d = chain()
    s = te.create_schedule(d.op)
    inline_intermediates(s.sch, among={"C", "D"})
    assert blocks(s) == ["B", "D"]  # C inlined; D is the output; B not among those asked for
    s = te.create_schedule(d.op)
    inline_intermediates(s.sch, where=lambda block: block.name != "B")
    assert blocks(s) == ["B", "D"]
    s = te.create_schedule(d.op)
    inline_intermediates(s.sch)
    assert blocks(s) == ["D"]


def test_reductions_are_not_inlined():
    x = te.placeholder((8, 24), "float32", name="X")
    k = te.reduce_axis((0, 24), "k")
    total = te.compute((8,), lambda i: te.sum(x[i, k], axis=k), name="T")
    y = te.compute((8, 24), lambda i, j: x[i, j] / total[i], name="Y")
    s = te.create_schedule(y.op)
    inline_intermediates(s.sch)
    assert blocks(s) == ["T", "Y"]


@pytest.mark.parametrize(("n", "lanes", "expected"), [
    (48, LANES, [("parallel", 32 * 3), ("vectorized", 16)]),  # the default schedules: one register
    (40, LANES, [("parallel", 32 * 5), ("vectorized", 8)]),
    (30, LANES, [("parallel", 32), ("serial", 30)]),  # no width divides 30: scalar, as a guarded loop would run
    (30, (), [("parallel", 32), ("vectorized", 30)]),  # the tuner: the whole loop, the lowering splits it
])
def test_parallel_vectorize_elementwise(n, lanes, expected):
    a, d = chain(32, n)
    s = te.create_schedule(d.op)
    inline_intermediates(s.sch)
    parallel_vectorize(s.sch, s[d].block, lanes)
    assert loops(s, d) == expected
    x = random_array((32, n))
    out = np.empty_like(x)
    ember.build(s, [a, d])(x, out)
    np.testing.assert_allclose(out, np.exp(x * 2 + 1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("lanes", "expected"), [
    (LANES, [("parallel", 4), ("serial", 6), ("serial", 10)]),  # the innermost spatial loop stays serial
    ((), [("parallel", 24), ("serial", 10)]),  # every spatial loop in parallel
])
def test_parallel_vectorize_reduction(lanes, expected):
    x = te.placeholder((4, 6, 10), "float32", name="X")
    k = te.reduce_axis((0, 10), "k")
    y = te.compute((4, 6), lambda i, j: te.sum(x[i, j, k], axis=k), name="Y")
    s = te.create_schedule(y.op)
    parallel_vectorize(s.sch, s[y].block, lanes)
    assert loops(s, y) == expected
    data = random_array((4, 6, 10))
    out = np.empty((4, 6), "float32")
    ember.build(s, [x, y])(data, out)
    np.testing.assert_allclose(out, data.sum(-1), rtol=1e-5, atol=1e-5)


def test_a_scheduled_nest_is_left_alone():
    a, d = chain()
    s = te.create_schedule(d.op)
    s[d].split(d.op.axis[1], factor=4)
    before = loops(s, d)
    parallel_vectorize(s.sch, s[d].block, LANES)
    assert loops(s, d) == before


def test_symbols_are_shared_within_a_kernel_and_not_kept_between_kernels():
    types = [TensorType(("n", 4)), TensorType((4, "n")), TensorType(("m",))]
    x, y, z = placeholders(types, ["x", "y", "z"])
    assert x.shape[0] is y.shape[1]
    assert z.shape[0] is not x.shape[0]
    (x2,) = placeholders(types[:1], ["x"])
    assert x2.shape[0] is not x.shape[0] and x2.shape[0].name == "n"  # a kernel of its own
    assert te_shape(TensorType((2, "n")), [x])[1] is x.shape[0]
