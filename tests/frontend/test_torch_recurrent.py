"""nn.LSTM, nn.GRU and nn.RNN through ember.compile (torch.export: aten.lstm.input and its
kin) against torch eager, with fresh random inputs; and the same modules exported by
torch.onnx.export(dynamo=True), whose LSTM and GRU nodes ember compiles through ONNX."""

import warnings

import numpy as np
import pytest
import torch

import ember
from ember.frontend.torch import import_module
from ember.testing import assert_close

RTOL, ATOL = 1e-4, 1e-5
# torch.export's note on nn.RNNBase's flattened weights, which are the module's own parameters
pytestmark = pytest.mark.filterwarnings("ignore:The tensor attributes")


class WithStates(torch.nn.Module):
    """A recurrent layer called with initial states that are inputs of the model."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *states):
        return self.rnn(x, states if len(states) > 1 else states[0])


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in _flat(o)]


def _check(module, compiled, shapes, seed):
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randn(*s, generator=gen) for s in shapes]
    with torch.no_grad():
        expected = _flat(module(*xs))
    actual = compiled(*[x.numpy() for x in xs])
    actual = actual if isinstance(actual, list | tuple) else [actual]
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert_close(np.asarray(a), e.numpy(), RTOL, ATOL, f"output {k} of {module}")


def _seeded(make):
    torch.manual_seed(0)
    return make().eval()


MODULES = {
    "lstm-2-layers-bidirectional": (lambda: torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True), [(5, 3, 6)]),
    "lstm-batch-first-states": (lambda: WithStates(torch.nn.LSTM(6, 8, batch_first=True)),
                                [(3, 5, 6), (1, 3, 8), (1, 3, 8)]),
    "gru": (lambda: torch.nn.GRU(6, 8), [(5, 3, 6)]),
    "gru-2-layers-bidirectional-batch-first": (
        lambda: WithStates(torch.nn.GRU(6, 8, num_layers=2, bidirectional=True, batch_first=True)),
        [(3, 5, 6), (4, 3, 8)]),
    "rnn-relu-no-bias": (lambda: torch.nn.RNN(6, 8, nonlinearity="relu", bias=False, num_layers=2), [(5, 3, 6)]),
}


@pytest.mark.parametrize("name", MODULES)
def test_against_torch(name):
    make, shapes = MODULES[name]
    module = _seeded(make)
    compiled = ember.compile(module, tuple(torch.randn(*s) for s in shapes))
    for seed in (1, 2):
        _check(module, compiled, shapes, seed)


def test_one_layer_per_recurrent_node():
    """A 2-layer bidirectional LSTM is two lstm nodes, each after one projection gemm; the
    zero initial states torch passes are left out."""
    graph = import_module(_seeded(MODULES["lstm-2-layers-bidirectional"][0]), (torch.randn(5, 3, 6),))
    ops = [n.op for n in graph.nodes]
    assert ops.count("lstm") == 2 and ops.count("gemm") == 2
    assert all(n.attrs["given"] == () for n in graph.nodes if n.op == "lstm")


@pytest.mark.parametrize("name", ["lstm-2-layers-bidirectional", "gru-2-layers-bidirectional-batch-first"])
def test_onnx_export(name):
    make, shapes = MODULES[name]
    module = _seeded(make)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, tuple(torch.randn(*s) for s in shapes), dynamo=True, verbose=False)
    ops = {n.op_type for n in program.model_proto.graph.node}
    assert ops & {"LSTM", "GRU"}, f"the exporter wrote {sorted(ops)}"
    _check(module, ember.compile(program.model_proto), shapes, seed=3)
