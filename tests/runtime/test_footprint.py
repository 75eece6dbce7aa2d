"""A compiled model holds each weight once: its graph's constants are the aligned weights its
kernels read (packed panels where packed), not a second copy; saving and loading still work; a
caller's constants are still copied. A compile allocates about one copy of the weights: the
model's."""

import tracemalloc

import numpy as np
import pytest
import torch

import ember
from ember.compiler import compile_graph
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.runtime.summary import held_bytes
from ember.testing import random_array


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 256), torch.nn.GELU(), torch.nn.Linear(256, 256)).eval()
    x = torch.randn(8, 48)
    return model, x, ember.compile(model, (x,))


def test_weights_held_once(compiled):
    _, _, cm = compiled
    packed = sum(a.nbytes for a in cm.weights.values())
    assert any(".panels" in name for name in cm.weights)  # (256 x 256: pack_weights.MIN_WEIGHTS)
    assert held_bytes(cm) <= 1.1 * packed
    constants = dict(cm.graph.all_constants())
    assert all(constants[w] is a for w, a in cm.weights.items())
    assert all(not a.flags.writeable and a.ctypes.data % cm.plan.align == 0 for a in cm.weights.values())


def test_outputs_and_save_load_unchanged(compiled, tmp_path):
    model, x, cm = compiled
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(cm(x.numpy()), expected, rtol=1e-5, atol=1e-5)
    loaded = ember.load(cm.save(tmp_path / "saved"))
    np.testing.assert_array_equal(loaded(x.numpy()), cm(x.numpy()))
    assert held_bytes(loaded) <= 1.1 * sum(a.nbytes for a in loaded.weights.values())
    for name, a in loaded.graph.all_constants():  # the graph read back: the weights the model was saved with
        if name in cm.weights:
            np.testing.assert_array_equal(a, cm.weights[name])


def test_caller_constants_copied():
    """A constant of the caller's graph is copied (the caller may change it); one the compile made
    (a packed weight) is taken as it is."""
    g = Graph("given")
    x = g.add_input("x", TensorType((4, 16)))
    w = random_array((16, 16))
    y, = add_op(g, "matmul", [x, g.add_constant(w, "w")])
    g.set_outputs([y])
    cm = compile_graph(g, opt_level=0)
    a = random_array((4, 16))
    expected = a @ w
    w[...] = 0  # the caller's array changed after the compile
    np.testing.assert_allclose(cm(a), expected, rtol=1e-5, atol=1e-5)
    assert not np.shares_memory(cm.weights["w"], w)


class _Product(torch.nn.Module):
    """x @ W (W a parameter, as it lies) into a linear layer (W transposed)."""

    def __init__(self, n: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n, n))
        self.linear = torch.nn.Linear(n, n)

    def forward(self, x):
        return self.linear(torch.relu(x @ self.w))


def test_compile_allocates_the_weights_once():
    """The NumPy memory a compile allocates at its peak (tracemalloc: NumPy's arrays, not torch's)
    is about the model's weights, packed: the import views the module's tensors (one copy of W
    more before, 1.67x). The rest is the compile's Python objects (about 1 MB). The model's
    weights are its own: a change to the module's after the compile is not the model's."""
    torch.manual_seed(0)
    ember.compile(_Product(16).eval(), (torch.randn(8, 16),))  # (the modules a first compile imports, traced not)
    model, x = _Product(1024).eval(), torch.randn(8, 1024)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    tracemalloc.start()
    try:
        cm = ember.compile(model, (x,))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 1.4 * weights, f"peak {peak / weights:.2f}x the weights"
    with torch.no_grad():
        expected = model(x).numpy()
        for p in model.parameters():  # (the model holds copies of its own: the module's change is not its)
            p.add_(1.0)
    np.testing.assert_allclose(cm(x.numpy()), expected, rtol=1e-4, atol=1e-3)
