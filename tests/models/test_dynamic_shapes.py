"""Dynamic shapes end to end: a model compiled once with torch.export's dynamic_shapes (a symbol
and a dimension that is an expression of symbols) runs at every size in range without compiling
again, checks the range and the expression dimensions of its inputs at each call, and keeps its
ranges when saved and loaded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import ember
from ember.errors import ArgumentTypeError, ShapeError
from ember.graph.core import Graph, TensorType
from ember.ops.nodes import add_op

RNG = np.random.default_rng()


class Attention(nn.Module):
    """Self-attention over a cache and new tokens: keys of length past + seq, outputs of length
    2 * seq (the attended tokens, then an MLP of them)."""

    def __init__(self):
        super().__init__()
        self.qkv, self.mlp = nn.Linear(32, 96), nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))

    def forward(self, x, cache):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        keys, values = torch.cat([cache, k], dim=1), torch.cat([cache, v], dim=1)
        attended = torch.softmax(q @ keys.transpose(1, 2) / 32**0.5, dim=-1) @ values
        pos = torch.arange(cache.shape[1], cache.shape[1] + x.shape[1]).float()[None, :, None] / 64
        return torch.cat([attended, self.mlp(attended + pos)], dim=1), keys


SEQ = torch.export.Dim("seq", min=1, max=40)
PAST = torch.export.Dim("past", min=1, max=100)


@pytest.fixture(scope="module")
def compiled():
    torch.manual_seed(0)
    model = Attention().eval()
    example = (torch.randn(2, 5, 32), torch.randn(2, 7, 32))
    return model, ember.compile(model, example, dynamic_shapes=({1: SEQ}, {1: PAST}))


def test_one_compile_serves_every_size(compiled, monkeypatch):
    model, cm = compiled
    assert [t.shape for t in cm.spec.outputs] == [(2, "2*seq", 32), (2, "past + seq", 32)]
    assert cm.spec.ranges == {"seq": (1, 40), "past": (1, 100)}

    def no_compile(*args, **kwargs):
        raise AssertionError("a call compiled again")

    monkeypatch.setattr("ember.backends.c.build_library", no_compile)
    monkeypatch.setattr(ember.compiler, "compile_graph", no_compile)
    for seq, past in [(1, 1), (3, 17), (40, 100), (11, 2)]:
        x, cache = torch.randn(2, seq, 32), torch.randn(2, past, 32)
        got = cm(x, cache)
        with torch.no_grad():
            want = model(x, cache)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"seq {seq} past {past}")


def test_sizes_outside_the_range_are_refused(compiled):
    _, cm = compiled
    with pytest.raises(ShapeError, match=r"input 'x' dimension 1 is 41, which binds 'seq' outside the range \[1, 40\]"):
        cm(torch.randn(2, 41, 32), torch.randn(2, 3, 32))
    with pytest.raises(ShapeError, match=r"binds 'past' outside the range \[1, 100\]"):
        cm(torch.randn(2, 4, 32), torch.randn(2, 101, 32))


def test_the_ranges_are_saved(compiled, tmp_path):
    _, cm = compiled
    loaded = ember.load(cm.save(tmp_path / "attention"))
    assert loaded.spec.ranges == cm.spec.ranges
    x, cache = RNG.standard_normal((2, 6, 32), dtype=np.float32), RNG.standard_normal((2, 9, 32), dtype=np.float32)
    for g, w in zip(loaded(x, cache), cm(x, cache)):
        np.testing.assert_array_equal(g, w)
    with pytest.raises(ShapeError, match="outside the range"):
        loaded(RNG.standard_normal((2, 50, 32), dtype=np.float32), cache)


@pytest.mark.parametrize("target", ["c", "python"])
def test_an_input_dimension_that_is_an_expression_is_checked(target):
    g = Graph()
    x = g.add_input("x", TensorType(("seq", 4)))
    y = g.add_input("y", TensorType(("2*seq + 1", 4)))
    (s,) = add_op(g, "concat", [x, x, y], {"axis": 0})
    g.set_outputs([s])
    cm = ember.compile(g, target=target)
    assert cm.spec.outputs[0].shape == ("4*seq + 1", 4)
    a, b = RNG.standard_normal((3, 4), dtype=np.float32), RNG.standard_normal((7, 4), dtype=np.float32)
    np.testing.assert_array_equal(cm(a, b), np.concatenate([a, a, b]))
    with pytest.raises(ShapeError, match=r"input 'y' dimension 0 is 6, expected 2\*seq \+ 1 = 7 \(seq=3"):
        cm(a, b[:6])


def test_a_symbol_only_in_expressions_is_refused():
    g = Graph()
    x = g.add_input("x", TensorType(("2*seq", 4)))
    (y,) = add_op(g, "relu", [x])
    g.set_outputs([y])
    with pytest.raises(ShapeError, match="no input has"):
        ember.compile(g)


def test_dynamic_shapes_is_for_torch_modules():
    g = Graph()
    x = g.add_input("x", TensorType((4,)))
    (y,) = add_op(g, "relu", [x])
    g.set_outputs([y])
    with pytest.raises(ArgumentTypeError, match="dynamic_shapes is torch.export's specification"):
        ember.compile(g, dynamic_shapes=({0: SEQ},))


def test_options_the_model_has_no_use_for_are_refused():
    """cache (the model cache's: torch modules only) and max_specializations (ONNX models with
    runtime-valued inputs only) were dropped for the other models."""
    g = Graph()
    g.set_outputs(add_op(g, "relu", [g.add_input("x", TensorType((4,)))]))
    with pytest.raises(ArgumentTypeError, match="cache='trace' says how the model cache finds a torch.nn.Module; "
                                                "a Graph is not cached"):
        ember.compile(g, cache="trace")
    with pytest.raises(ArgumentTypeError, match="max_specializations bounds the compiles of an ONNX model with "
                                                "runtime-valued inputs; a Graph compiles once"):
        ember.compile(g, max_specializations=2)
    with pytest.raises(ArgumentTypeError, match="; a Linear compiles once"):
        ember.compile(nn.Linear(4, 2), (torch.zeros(1, 4),), max_specializations=2)


def test_dynamic_shapes_by_argument_name():
    class Scale(nn.Module):
        def forward(self, x, y):
            return x * 2 + y.sum()

    batch = torch.export.Dim("batch", min=2, max=16)
    cm = ember.compile(Scale(), (torch.randn(3, 4), torch.randn(5)), dynamic_shapes={"x": {0: batch}, "y": None})
    assert cm.spec.inputs[0].shape == ("batch", 4) and cm.spec.ranges == {"batch": (2, 16)}
    x, y = torch.randn(9, 4), torch.randn(5)
    np.testing.assert_allclose(cm(x, y).numpy(), (x * 2 + y.sum()).numpy(), rtol=1e-6, atol=1e-6)
