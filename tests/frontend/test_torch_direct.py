"""torch.export's trace converted without run_decompositions (ember.frontend.torch.direct): the
composites the trace keeps give the graph their decomposition gives, in-place writes that another
reader could see go through the decomposition, and calls no output needs are not converted."""

import numpy as np
import torch
import torch.nn.functional as F
from torch_check import check_import, expected_outputs

from ember.frontend.torch.direct import convertible
from ember.frontend.torch.module import decompose, import_program, trace
from ember.ops.evaluate import evaluate
from ember.testing import assert_close


class Composites(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.conv1d = torch.nn.Conv2d(4, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Conv1d(4, 4, 3)
        self.bn.running_mean.uniform_(-1, 1)
        self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x, z):
        y = self.bn(self.conv(x)).relu_()
        return (F.adaptive_avg_pool2d(y, 1), F.adaptive_avg_pool2d(y, (2, 3)), F.max_pool2d(y, 2, ceil_mode=True),
                F.dropout(y, 0.5, training=False), y.flatten(1).t(), x.transpose(1, 3).reshape(2, -1),
                F.softmax(x, -1, dtype=torch.float64), F.log_softmax(x, 1), x.to(torch.float64), (x * 2).sum(),
                F.hardtanh_(x * 2, 0, 6), self.conv1d(z))


def test_composites_convert_as_their_decomposition():
    inputs = torch.randn(2, 4, 9, 11), torch.randn(2, 4, 16)
    model = Composites().eval()
    traced = trace(model, inputs)
    assert convertible(traced)
    direct, decomposed = import_program(traced), import_program(decompose(traced))
    assert sorted(n.op for n in direct.nodes) == sorted(n.op for n in decomposed.nodes)  # (the order may differ)
    arrays = [x.numpy() for x in inputs]
    outputs = evaluate(direct, *arrays)
    for a, b in zip(outputs, evaluate(decomposed, *arrays), strict=True):
        np.testing.assert_array_equal(a, b)
    for k, (a, e) in enumerate(zip(outputs, expected_outputs(model, inputs), strict=True)):
        assert a.dtype == e.dtype, k
        assert_close(a, e, 1e-4, 1e-4, f"output {k}")


class ReadBeforeWrite(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        before = y + 1
        y.relu_()  # (`before` read y first: the write must not reach it)
        return before, y


class WriteThroughView(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y[:, 0].relu_()  # (writes into y through a view)
        return y


def test_in_place_writes_another_reader_sees_are_decomposed():
    x = torch.randn(3, 5)
    for model in (ReadBeforeWrite(), WriteThroughView()):
        assert not convertible(trace(model, (x,)))
        check_import(model, x)


class Discards(torch.nn.Module):
    def forward(self, x):
        torch.fft.fft(x)  # (no handler converts it; nothing reads it)
        return x.relu()


def test_calls_no_output_needs_are_not_converted():
    x = torch.randn(4, 8)
    graph = import_program(trace(Discards(), (x,)))
    assert [n.op for n in graph.nodes] == ["relu"]
    np.testing.assert_array_equal(evaluate(graph, x.numpy())[0], x.relu().numpy())
