"""ember.passes.split_reduce for a GPU target: a reduction to one value of at least LARGE
elements becomes reduce_parts (two parts a multiprocessor) and the reduction of the partials,
computing what it did (ember.ops.evaluate); a smaller one, one over some axes, a mean over a
symbolic size and a CPU target are left alone. (The kernels on the simulated GPU:
tests/cuda/test_gpu_split_reduce.py.)"""

from __future__ import annotations

from pass_check import check_same, ops

from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.split_reduce import LARGE, split_reduce
from ember.target import GPU, Target

GPU_TARGET = Target("cuda", simulate=True, gpu=GPU(multiprocessors=3))


def reduced(op, shape, dtype="float32", **attrs):
    g = Graph("reduce")
    x = g.add_input("x", TensorType(shape, dtype))
    g.set_outputs(add_op(g, op, [x], attrs))
    return g


def test_a_large_mean_in_half_precision_with_keepdims():
    g = reduced("mean", (2, LARGE // 2 + 3), "float16", keepdims=True)
    out = split_reduce(g, GPU_TARGET)
    assert ops(out) == ["reshape", "reduce_parts", "sum", "div", "cast", "reshape"]
    assert next(n for n in out.nodes if n.op == "reduce_parts").attrs["parts"] == 6
    check_same(g, out, rtol=2e-3)


def test_a_large_max_and_a_symbolic_sum():
    for g in (reduced("max", (LARGE + 1,)), reduced("sum", ("n", LARGE // 64))):
        out = split_reduce(g, GPU_TARGET)
        assert "reduce_parts" in ops(out)
        if g.inputs[0].type.is_static:
            check_same(g, out)


def test_what_stays_one_kernel():
    for g in (reduced("sum", (LARGE - 1,)), reduced("sum", (2, LARGE), axes=1), reduced("mean", ("n", LARGE)),
              reduced("sum", ("n", 7))):
        assert split_reduce(g, GPU_TARGET) is g or ops(split_reduce(g, GPU_TARGET)) == ops(g)
    for cpu in (Target("python"), None):
        assert ops(split_reduce(reduced("sum", (LARGE,)), cpu)) == ["sum"]


def test_float64_partials_keep_float64():
    """A float64 sum or product split into parts: the partials are float64 (float32 partials lost
    all but 7 digits of a float64 sum)."""
    for op in ("sum", "prod", "mean", "max"):
        g = reduced(op, (LARGE + 5,), "float64")
        out = split_reduce(g, GPU_TARGET)
        assert next(n for n in out.nodes if n.op == "reduce_parts").outputs[0].type.dtype == "float64"
        check_same(g, out, rtol=1e-12, atol=0)
