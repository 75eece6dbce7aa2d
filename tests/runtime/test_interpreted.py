"""A whole model on the loop-IR interpreter (target "python") computes what the C build computes:
a small zoo model, and a graph with symbolic sizes, views, in-place writes and copied outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.runtime.interpreted import InterpretedModel
from ember.testing import random_array

RTOL, ATOL = 1e-5, 1e-5


def sharing_model() -> Graph:
    """exp -> add -> tanh over (n, 8) (in place), a reshape of a kernel's value (a view), an output
    that is a weight returned as it is and an output that is the input (copies)."""
    g = Graph("sharing")
    x = g.add_input("x", TensorType(("n", 8)))
    (y,) = add_op(g, "exp", [x])
    (y,) = add_op(g, "add", [y, g.add_constant(random_array((8,)), "b")])
    (y,) = add_op(g, "tanh", [y])
    (v,) = add_op(g, "reshape", [y], {"shape": ("n", 2, 4)})
    (s,) = add_op(g, "sum", [v], {"axes": (1, 2), "keepdims": False})
    g.set_outputs([y, s, x])
    return g


@pytest.mark.parametrize("opt_level", [0, 2])
def test_interpreted_model_agrees_with_c(opt_level):
    g = sharing_model()
    c = ember.compile(g, opt_level=opt_level, disabled_passes=["fuse"])
    py = ember.compile(g, opt_level=opt_level, disabled_passes=["fuse"], target="python")
    assert isinstance(py, InterpretedModel) and py.spec.target["target"] == "python"
    assert [k.ops for k in py.kernels] == [k.ops for k in c.kernels]
    assert any(t.shares for t in py.plan.tensors)  # in place: the interpreter writes over its input
    for n in (1, 5):
        x = random_array((n, 8))
        got, want = py(x), c(x)
        for a, b, r in zip(got, want, evaluate(g, x), strict=True):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4)


def test_a_zoo_model_on_the_interpreter_agrees_with_c():
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.models import ZOO

    model, inputs = ZOO["bert_base"](small=True)
    c = ember.compile(model, inputs)
    py = ember.compile(model, inputs, target="python")
    assert len(py.kernels) == len(c.kernels)
    arrays = [x.numpy() for x in inputs]
    np.testing.assert_allclose(py(*arrays), c(*arrays), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(py(*arrays), model(*inputs).numpy(), rtol=1e-4, atol=1e-4)


def test_an_interpreted_model_is_not_saved_or_profiled(tmp_path):
    py = ember.compile(sharing_model(), target="python")
    with pytest.raises(ember.ConfigError, match="target='c' to save"):
        py.save(tmp_path / "m")
    with pytest.raises(ember.ConfigError, match="not profiled"):
        py.profile(random_array((2, 8)))
    with pytest.raises(ember.ConfigError, match="checked=True needs target 'c'"):
        ember.compile(sharing_model(), target="python", checked=True)
