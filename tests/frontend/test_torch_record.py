"""A module traced by one eager run (ember.frontend.torch.record): the calls torch.export's trace
holds, converted into the graph that trace gives; what the run cannot stand for (a read of a
tensor's values, an in-place write to the module's state or an input) is refused before it runs,
and torch.export traces the module instead, with the reason."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_check import expected_outputs

from ember.frontend.torch.digest import program_digest
from ember.frontend.torch.module import first_trace, import_program, import_traced, trace
from ember.frontend.torch.record import NotRecorded, Recorded, record
from ember.ops.evaluate import evaluate
from ember.testing import assert_close


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4)
        self.norm, self.fc = torch.nn.LayerNorm(8), torch.nn.Linear(8, 6)
        self.bn.running_mean.uniform_(-1, 1)
        self.bn.running_var.uniform_(0.5, 2)
        self.register_buffer("scale", torch.rand(6) + 0.5)
        self.offset = torch.randn(6)  # (a plain tensor attribute: a constant of the graph)

    def forward(self, x, q):
        y = F.max_pool2d(self.bn(self.conv(x)).relu_() + x, 2)
        attn = F.scaled_dot_product_attention(q, q, q)
        z = self.fc(self.norm(attn.transpose(1, 2).reshape(2, 3, 8)))
        return F.adaptive_avg_pool2d(y, 1).flatten(1), F.gelu(z) * self.scale + self.offset + torch.tensor(0.5)


@pytest.fixture(scope="module")
def block():
    return Block().eval(), (torch.randn(2, 4, 6, 6), torch.randn(2, 2, 3, 4))


def test_a_recording_converts_into_the_graph_torch_exports(block):
    model, inputs = block
    rec = record(model, inputs)
    exported = trace(model, inputs)
    calls = lambda g: [str(n.target) for n in g.nodes if n.op == "call_function"]  # noqa: E731
    assert calls(rec.gm.graph) == calls(exported.graph)
    recorded, graph = import_traced(rec, model, inputs), import_program(exported)
    assert [n.op for n in recorded.nodes] == [n.op for n in graph.nodes]
    arrays = [x.numpy() for x in inputs]
    outputs = evaluate(recorded, *arrays)
    for a, b in zip(outputs, evaluate(graph, *arrays), strict=True):
        np.testing.assert_array_equal(a, b)
    for k, (a, e) in enumerate(zip(outputs, expected_outputs(model, inputs), strict=True)):
        assert_close(a, e, 1e-5, 1e-5, f"output {k}")


def test_the_digest_of_a_recording_follows_the_weights_and_input_shapes(block):
    model, inputs = block
    digest = program_digest(record(model, inputs), {})
    assert digest == program_digest(record(model, inputs), {})
    assert digest != program_digest(record(model, (torch.randn(2, 4, 8, 8), inputs[1])), {})
    other = Block().eval()
    other.load_state_dict(model.state_dict())
    other.offset = model.offset
    assert program_digest(record(other, inputs), {}) == digest
    other.scale[0] += 1
    assert program_digest(record(other, inputs), {}) != digest


class Branches(torch.nn.Module):
    def forward(self, x):
        return x + 1 if x.sum() > 0 else x - 1


class Gathers(torch.nn.Module):
    def forward(self, x, i):
        return x[i] * 2, x[:, i[:2]]


def test_indexing_by_integers_is_recorded():
    x, i = torch.randn(4, 5), torch.tensor([3, 0, 3])
    rec = record(Gathers(), (x, i))
    outputs = evaluate(import_traced(rec, Gathers(), (x, i)), x.numpy(), i.numpy())
    for a, e in zip(outputs, expected_outputs(Gathers(), (x, i)), strict=True):
        np.testing.assert_array_equal(a, e)


class Lists(torch.nn.Module):
    def forward(self, x):
        return x * len([v for v in x.tolist() if v > 0])


class Counts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return x + self.calls


class WritesInput(torch.nn.Module):
    def forward(self, x):
        return x[0].relu_()


class Nonzero(torch.nn.Module):
    def forward(self, x):
        return x.nonzero()


class Masked(torch.nn.Module):
    def forward(self, x):
        return x[x > 0], x[torch.tensor([2, 0])]


@pytest.mark.parametrize("model, reason", [
    (Branches(), "reads a tensor's values"), (Lists(), "reads a tensor's values"),
    (Counts(), "writes a parameter, buffer, input or constant in place"),
    (WritesInput(), "writes a parameter, buffer, input or constant in place"),
    (Nonzero(), "reads a tensor's values"), (Masked(), "reads a tensor's values"),
])
def test_what_the_run_cannot_stand_for_is_refused_before_it_runs(model, reason):
    x = torch.randn(3, 4)
    before = x.clone(), {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(NotRecorded, match=reason):
        record(model, (x,))
    torch.testing.assert_close(x, before[0], rtol=0, atol=0)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[1][k], rtol=0, atol=0)


def test_a_refused_recording_is_traced_by_torch_export_with_the_reason(monkeypatch):
    x = torch.randn(3, 4)
    for model in (Counts(), WritesInput()):
        traced, why = first_trace(model, (x,))
        assert isinstance(traced, torch.export.ExportedProgram) and "in place" in why
    traced, why = first_trace(Block().eval(), (torch.randn(2, 4, 6, 6), torch.randn(2, 2, 3, 4)))
    assert isinstance(traced, Recorded) and why == ""
    assert first_trace(torch.nn.ReLU(), (x,), dynamic_shapes=({0: torch.export.Dim("n")},))[1] == "dynamic shapes"
    monkeypatch.setenv("EMBER_RECORD_TRACE", "0")
    assert first_trace(torch.nn.ReLU(), (x,))[1] == "EMBER_RECORD_TRACE is off"
