"""torch.cond and torch.while_loop: through torch.export (higher-order operators with their graph
modules) and through torch.onnx.export(dynamo=True) (If), compiled, against torch eager on inputs
that take each branch."""

import numpy as np
import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

import ember

RTOL, ATOL = 1e-4, 1e-5


class Cond(torch.nn.Module):
    """The same linear layer on both branches, then a relu and a scale on one, a transpose, sigmoid
    and transpose back on the other (another shape inside, the same output shape); the condition
    computed from the input."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.scale = torch.nn.Parameter(torch.randn(6))

    def forward(self, x):
        def then(x):
            return torch.relu(self.lin(x)) * self.scale

        def other(x):
            return torch.sigmoid(self.lin(x).transpose(0, 2) * 2).transpose(0, 2) - 0.5

        return torch.cond(x.mean() > 0, then, other, (x,)) + 1


class While(torch.nn.Module):
    """Repeats x <- sin(2x) + w while the counter is below n (a runtime value): a while loop."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x, n):
        def cond(i, x):
            return i < n

        def body(i, x):
            return i + 1, torch.sin(2 * x) + self.w

        return while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x))


def _inputs(sign: float) -> torch.Tensor:
    return torch.rand(2, 3, 6) * sign + 0.05 * sign


def _compare(got, model, *inputs) -> None:
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, list | tuple) else [got]
    assert len(got) == len(expected)
    for a, e in zip(got, expected):
        np.testing.assert_allclose(a, e.numpy(), rtol=RTOL, atol=ATOL)


@pytest.fixture(scope="module")
def cond_model():
    torch.manual_seed(0)
    return Cond().eval()


@pytest.fixture(scope="module")
def exported(cond_model):
    return ember.compile(cond_model, (_inputs(1.0),))


@pytest.fixture(scope="module")
def through_onnx(cond_model):
    program = torch.onnx.export(cond_model, (_inputs(1.0),), dynamo=True, verbose=False)
    return ember.compile(program.model_proto)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_torch_cond_through_torch_export(cond_model, exported, sign):
    assert any(n.op == "if" for n in exported.graph.nodes)
    assert sum("lin.weight" in w for w in exported.spec.weights) == 1  # both branches read it: stored once
    x = _inputs(sign)
    _compare(exported(x.numpy()), cond_model, x)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_torch_cond_through_onnx_export(cond_model, through_onnx, sign):
    assert any(n.op == "if" for n in through_onnx.graph.nodes)
    x = _inputs(sign)
    _compare(through_onnx(x.numpy()), cond_model, x)


def test_torch_while_loop_runs_a_runtime_number_of_iterations():
    torch.manual_seed(0)
    model = While().eval()
    compiled = ember.compile(model, (torch.randn(4), torch.tensor(3)))
    assert any(n.op == "loop" for n in compiled.graph.nodes)
    for n in (0, 1, 7):
        x = torch.randn(4)
        _compare(compiled(x.numpy(), np.array(n)), model, x, torch.tensor(n))
