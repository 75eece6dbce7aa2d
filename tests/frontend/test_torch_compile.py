"""The torch.compile backend "ember": registered by name; compiled results match eager (rtol =
atol = 1e-4, float32); each new input shape compiles once; frozen weights follow in-place updates
and other module instances; a graph ember cannot compile runs in PyTorch with a warning.
Identical blocks between graph breaks: Dynamo hands over one block graph and calls it with each
block's weights; the graph is exported once per argument shapes and each weight set's kernels come
from the first set's lowering, while every set computes with its own weights. ember.compile of a
second instance of a module lowers nothing again either."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
import torch.nn as nn

import ember.lowering
import ember.torch_backend
from ember.errors import ArgumentTypeError
from ember.frontend.torch import export, import_program
from ember.lowering import LOWERED
from ember.torch_backend import EmberFallbackWarning, ember_backend

TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """A fresh Dynamo, and inference: in grad mode PyTorch runs the graphs (tests/reliability/
    test_torch_compile_semantics.py)."""
    torch._dynamo.reset()
    with torch.no_grad():
        yield
    torch._dynamo.reset()


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()


def recording(**options):
    """A backend that is ember's and keeps what it returns (to look at its cache)."""
    made = []

    def backend(gm, example_inputs):
        fn = ember_backend(gm, example_inputs, options=options)
        made.append(fn)
        return fn

    return backend, made


def test_registered_by_name():
    from torch._dynamo.backends.registry import lookup_backend

    assert "ember" in torch._dynamo.list_backends()
    assert lookup_backend("ember") is ember_backend


def test_matches_eager_without_fallback():
    model = mlp()
    compiled = torch.compile(model, backend="ember")
    x = torch.randn(4, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmberFallbackWarning)
        y = compiled(x)
    torch.testing.assert_close(y, model(x), **TOL)


def test_cnn_with_batch_norm_buffers():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 4 * 4, 5)).eval()
    model[1].running_mean.normal_()
    model[1].running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmberFallbackWarning)
        y = torch.compile(model, backend="ember")(x)
    torch.testing.assert_close(y, model(x), **TOL)


def test_each_new_shape_compiles_once():
    model = mlp()
    backend, made = recording()
    compiled = torch.compile(model, backend=backend)
    count = lambda: sum(len(fn.entries()) for fn in made)
    for n in (2, 3, 5):
        x = torch.randn(n, 16)
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    # Dynamo makes a static graph for n=2, then one with a symbolic batch: ember compiles it per shape
    assert len(made) == 2 and len(made[1].entries()) == 2
    for n in (3, 2, 5):  # n=2 now runs on the symbolic graph, which compiles it
        x = torch.randn(n, 16)
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    settled = count()
    for n in (2, 3, 5, 3):
        compiled(torch.randn(n, 16))
    assert count() == settled <= 4  # each (graph, shape) compiled once
    assert all(entry.model is not None for fn in made for entry in fn.entries())


def test_frozen_weights_follow_updates_and_instances():
    model, other = mlp(), mlp()
    compiled, compiled_other = torch.compile(model, backend="ember"), torch.compile(other, backend="ember")
    x = torch.randn(3, 16)
    torch.testing.assert_close(compiled(x), model(x), **TOL)
    torch.testing.assert_close(compiled_other(x), other(x), **TOL)  # same code, other weights
    with torch.no_grad():
        model[0].weight.mul_(-2.0)
    torch.testing.assert_close(compiled(x), model(x), **TOL)


@pytest.mark.parametrize("freeze, inputs", [(True, 1), (False, 5)])
def test_weights_are_constants_unless_freeze_is_off(freeze, inputs):
    model = mlp()
    backend, made = recording(freeze=freeze)
    x = torch.randn(3, 16)
    torch.testing.assert_close(torch.compile(model, backend=backend)(x), model(x), **TOL)
    (fn,) = made
    (entry,) = fn.entries()
    assert len(entry.model.spec.inputs) == inputs  # x, and without freezing the four parameters


def test_unsupported_graph_falls_back_with_a_warning():
    class Spectrum(nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).abs() * 2

    model = Spectrum()
    x = torch.randn(2, 8)
    with pytest.warns(EmberFallbackWarning, match="_fft_r2c"):
        y = torch.compile(model, backend=functools.partial(ember_backend))(x)
    torch.testing.assert_close(y, model(x), **TOL)


class Blocks(nn.Module):
    """Identical blocks with an eager op (a graph break) after each: Dynamo traces the block once
    and calls that graph with each block's parameters, as it does a transformer's layers."""

    def __init__(self, count: int):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(count))

    def forward(self, x):
        for b in self.blocks:
            x = _eager_tanh(b(x))
        return x


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) + x


@torch._dynamo.disable
def _eager_tanh(t):
    return torch.tanh(t)


@pytest.mark.parametrize("weight_sets", [64, 2])
def test_a_graph_over_many_weight_sets_compiles_once_per_set(monkeypatch, weight_sets):
    """Each block's weights compile once (or, past WEIGHT_SETS of them, one model with the weights
    as inputs serves the rest): no call after the first forward compiles anything."""
    from ember.torch_backend import EmberFunction

    monkeypatch.setattr(EmberFunction, "WEIGHT_SETS", weight_sets)
    compiles = []
    compile_ = EmberFunction._compile
    monkeypatch.setattr(EmberFunction, "_compile", lambda self, *a: compiles.append(1) or compile_(self, *a))
    model = Blocks(5).eval()
    backend, made = recording()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(3, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), **TOL)
        first = len(compiles)
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert len(compiles) == first
    (block,) = [fn for fn in made if len(fn.entries()) > 1]
    frozen = sum(len(by) for by in block.cache.values())
    assert (frozen, len(block.shared)) == ((5, 0) if weight_sets == 64 else (2, 1))
    assert all(entry.model is not None for entry in block.entries())


@pytest.fixture
def counted(monkeypatch):
    """A recording backend, the graphs it made, and the exports and lowerings since (LOWERED emptied,
    none read from the disk)."""
    monkeypatch.setenv("EMBER_LOWERED_CACHE", "0")
    LOWERED.clear()
    exports, lowerings = [], []
    export_, lower = ember.torch_backend.export, ember.lowering.lower_workload
    monkeypatch.setattr(ember.torch_backend, "export", lambda *a, **k: exports.append(1) or export_(*a, **k))
    monkeypatch.setattr(ember.lowering, "lower_workload", lambda w, *a: lowerings.append(w) or lower(w, *a))
    return *recording(), exports, lowerings


def check(compiled, model, x):
    """The compiled model against eager, every graph compiled by ember (no fallback)."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", EmberFallbackWarning)
        torch.testing.assert_close(compiled(x), model(x), **TOL)


def test_each_weight_set_reuses_the_export_and_the_kernels(counted):
    backend, made, exports, lowerings = counted
    model = Blocks(4).eval()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(3, 16)
    check(compiled, model, x)
    (block,) = [fn for fn in made if len(fn.entries()) > 1]
    stats = [e.model.stats for e in block.entries()]
    assert len(stats) == 4 and len(block.programs) == 1
    assert len(exports) == len(made)  # one export per Dynamo graph, not per weight set
    assert all(s.reused == s.lowered for s in stats[1:])  # sets after the first lower nothing
    assert len(lowerings) == len(set(lowerings))  # no workload lowered twice in the process

    with torch.no_grad():  # every set's weights changed in place: compiled again, from the same export
        for b in model.blocks:
            b.up.weight.mul_(-1.5)
    check(compiled, model, x)
    assert len(exports) == len(made) and len(lowerings) == len(set(lowerings))


def test_other_shapes_export_again(counted):
    backend, made, exports, lowerings = counted
    model = Blocks(2).eval()
    compiled = torch.compile(model, backend=backend)
    for rows in (3, 5):
        check(compiled, model, torch.randn(rows, 16))
    programs = sum(len(fn.programs) for fn in made)
    assert programs == len(exports) and programs > 1


def test_a_program_imports_other_weights_by_name():
    model = Block().eval()
    x = torch.randn(2, 16)
    ep = export(model, (x,))
    other = Block().eval()
    graph = import_program(ep, state_dict=dict(other.state_dict()))
    cm = ember.compile(graph)
    with torch.no_grad():
        torch.testing.assert_close(torch.as_tensor(cm(x.numpy())), other(x), **TOL)
    with pytest.raises(ArgumentTypeError, match=r"no parameters or buffers \['up.wieght'\]"):
        import_program(ep, state_dict={"up.wieght": other.up.weight})


def test_ember_compile_of_another_instance_lowers_nothing_again():
    LOWERED.clear()
    x = torch.randn(5, 16)
    first, second = Block().eval(), Block().eval()
    a, b = ember.compile(first, (x,)), ember.compile(second, (x,))
    assert a.stats.reused == 0 and b.stats.reused == b.stats.lowered > 0
    with torch.no_grad():
        for model, cm in ((first, a), (second, b)):
            torch.testing.assert_close(torch.as_tensor(cm(x.numpy())), model(x), **TOL)
