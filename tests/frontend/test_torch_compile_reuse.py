"""torch.compile(backend="ember") of identical blocks between graph breaks: Dynamo hands over one
block graph and calls it with each block's weights; the graph is exported once per argument
shapes and each weight set's kernels come from the first set's lowering, while every set computes
with its own weights (rtol = atol = 1e-4 against eager, float32). Other shapes export again.
ember.compile of a second instance of a module lowers nothing again either."""

from __future__ import annotations

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


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down, self.norm = nn.Linear(16, 48), nn.Linear(48, 16), nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(self.down(torch.nn.functional.gelu(self.up(x))) + x)


class Blocks(nn.Module):
    """Blocks with an eager op (a graph break) after each."""

    def __init__(self, count: int):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(count))

    def forward(self, x):
        for b in self.blocks:
            x = _eager(b(x))
        return x


@torch._dynamo.disable
def _eager(t):
    return t + 0.01 * torch.tanh(t)


@pytest.fixture
def counted(monkeypatch):
    """The graphs ember_backend made, and the exports and lowerings since (LOWERED emptied)."""
    torch._dynamo.reset()
    LOWERED.clear()
    made, exports, lowerings = [], [], []
    export_, lower = ember.torch_backend.export, ember.lowering.lower_workload
    monkeypatch.setattr(ember.torch_backend, "export", lambda *a, **k: exports.append(1) or export_(*a, **k))
    monkeypatch.setattr(ember.lowering, "lower_workload", lambda w, *a: lowerings.append(w) or lower(w, *a))

    def backend(gm, example_inputs):
        made.append(ember_backend(gm, example_inputs))
        return made[-1]

    yield backend, made, exports, lowerings
    torch._dynamo.reset()


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
