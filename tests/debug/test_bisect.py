"""ember.debug.bisect names the pass at fault: a planted wrong pass (relu -> identity, or a pass
that breaks the build) is named, a correct pipeline gives None."""

import numpy as np
import pytest

from ember.debug import bisect
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.pipeline import PASSES, PIPELINES
from ember.passes.rewrite import rebuild
from ember.testing import random_array

LEVEL = max(PIPELINES)


def _graph() -> Graph:
    """relu(x * 1) + relu(x * 1): work for simplify and cse, and a relu to break."""
    g = Graph("bisected")
    x = g.add_input("x", TensorType((4, 8)))
    one = g.add_constant(np.ones((8,), "float32"), "one")
    r1, = add_op(g, "relu", add_op(g, "mul", [x, one]))
    r2, = add_op(g, "relu", add_op(g, "mul", [x, one]))
    y, = add_op(g, "add", [r1, r2])
    g.set_outputs([y])
    return g


def break_relu(graph: Graph) -> Graph:
    """Wrong on purpose: relu becomes identity."""
    def rewrite(rw, node, ins):
        return rw.emit("identity", ins) if node.op == "relu" else None

    return rebuild(graph, rewrite)


def crash(graph: Graph) -> Graph:
    raise RuntimeError("planted failure")


def _plant(monkeypatch, fn, after="simplify") -> list[str]:
    monkeypatch.setitem(PASSES, fn.__name__, fn)
    pipeline = list(PIPELINES[LEVEL])
    pipeline.insert(pipeline.index(after) + 1, fn.__name__)
    monkeypatch.setitem(PIPELINES, LEVEL, pipeline)
    return pipeline


def test_correct_pipeline_has_no_culprit():
    result = bisect(_graph())
    assert result.culprit is None and result.fixes == ()
    assert result.passes == tuple(PIPELINES[LEVEL])
    assert all(t.ok and t.max_error <= 1e-6 for t in (*result.cumulative, *result.one_off))
    assert "verdict: no pass changes the output" in str(result)


def test_names_a_planted_wrong_pass(monkeypatch):
    pipeline = _plant(monkeypatch, break_relu)
    x = random_array((4, 8))
    result = bisect(_graph(), [x], rtol=1e-5, atol=1e-5)
    assert result.culprit == "break_relu"
    assert result.fixes == ("break_relu",)
    k = pipeline.index("break_relu")
    assert all(t.ok for t in result.cumulative[:k]) and not any(t.ok for t in result.cumulative[k:])
    wrong = result.cumulative[k]
    # relu(v) - v = -min(v, 0): the error is twice the most negative entry of x
    np.testing.assert_allclose(wrong.max_error, 2 * -x.min(), rtol=1e-6)
    text = str(result)
    assert "pass 'break_relu' is the first to change the output beyond tolerance" in text
    assert "[WRONG] + break_relu" in text


def test_a_pass_that_breaks_the_build_is_at_fault(monkeypatch):
    _plant(monkeypatch, crash, after="fold_constants")
    result = bisect(_graph(), passes=["fold_constants", "crash", "simplify"])
    assert result.culprit == "crash" and result.fixes == ("crash",)
    assert result.cumulative[1].failure == "RuntimeError: planted failure"
    assert "failed: RuntimeError: planted failure" in str(result)


def test_unknown_pass():
    with pytest.raises(ValueError, match=r"passes \['nope'\] are not in the opt_level"):
        bisect(_graph(), passes=["nope"])
