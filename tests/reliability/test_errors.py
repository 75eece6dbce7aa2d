"""Every error ember raises on purpose is an EmberError, so `except ember.EmberError` catches all
of them, and each keeps the builtin base a caller may already catch (ValueError, TypeError)."""

import numpy as np
import pytest

import ember
from ember import te
from ember.graph.core import GraphError
from ember.te.tensor import TEError
from ember.tir.dtype import DTypeError, check


@pytest.mark.parametrize("cls, builtin", [(GraphError, ValueError), (TEError, ValueError), (DTypeError, TypeError),
                                          (ember.ConfigError, ValueError), (ember.ArtifactError, ValueError),
                                          (ember.ArgumentTypeError, TypeError), (ember.ShapeError, ValueError)])
def test_error_classes_are_ember_errors(cls, builtin):
    assert issubclass(cls, ember.EmberError) and issubclass(cls, builtin)


def test_misuse_is_an_ember_error():
    with pytest.raises(ember.ArgumentTypeError, match="takes a Graph, a torch.nn.Module, or an ONNX model"):
        ember.compile(42)
    with pytest.raises(DTypeError):
        check("float7")
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ember.ConfigError, match="unknown target 'cuda'"):
        ember.build(s, [A, B], target="cuda")
    with pytest.raises(ember.ArgumentTypeError, match="needs its arguments"):
        ember.lower(s)
    f = ember.build(s, [A, B])
    with pytest.raises(ember.ConfigError, match="repeat and number"):
        ember.bench(f, np.random.rand(8).astype("float32"), np.empty(8, "float32"), repeat=0)
