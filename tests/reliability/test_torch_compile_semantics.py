"""torch.compile(backend="ember") as eager behaves, each case the user's steps in a child process:
the name "ember" looked up from threads at once in a fresh process (with and without `import
ember`); weights given new values between calls; training (backward through a compiled graph)
gets eager's gradients; a graph that returns a view of its argument returns a view; a Dim with
no upper bound compiles."""

from __future__ import annotations

import pytest

TIMEOUT = 240

CHECKED = """
import warnings, numpy as np, torch
from ember.torch_backend import EmberFallbackWarning
torch.manual_seed(0)
TOL = dict(rtol=1e-4, atol=1e-4)
"""


@pytest.mark.parametrize("imported", ["", "import ember"])
def test_name_looked_up_from_threads_at_once(python, imported):
    code = imported + """
import threading, torch
errors, barrier = [], threading.Barrier(4)
def run(k):
    try:
        model = torch.nn.Linear(4, 2).eval()
        x = torch.randn(3, 4)
        barrier.wait()
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(model, backend="ember")(x), model(x), rtol=1e-4, atol=1e-4)
    except BaseException as e:
        errors.append(f"thread {k}: {type(e).__name__}: {e}")
threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_weights_given_new_values_between_calls(python):
    code = CHECKED + """
warnings.simplefilter("error", EmberFallbackWarning)
model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3)).eval()
compiled = torch.compile(model, backend="ember")
x = torch.randn(4, 8)
with torch.no_grad():
    torch.testing.assert_close(compiled(x), model(x), **TOL)
    model[0].weight.data = torch.randn(6, 8)              # new data, same Parameter and version
    torch.testing.assert_close(compiled(x), model(x), **TOL)
    model[2].bias.copy_(torch.randn(3))                   # in place, counted by the version
    torch.testing.assert_close(compiled(x), model(x), **TOL)
    model.load_state_dict({k: torch.randn_like(v) for k, v in model.state_dict().items()})
    torch.testing.assert_close(compiled(x), model(x), **TOL)

# writes PyTorch does not count (through .data, through NumPy): read on each call without freezing
torch._dynamo.reset()
compiled = torch.compile(model, backend="ember", options={"freeze": False})
with torch.no_grad():
    torch.testing.assert_close(compiled(x), model(x), **TOL)
    model[0].weight.data.copy_(torch.randn(6, 8))
    torch.testing.assert_close(compiled(x), model(x), **TOL)
    model[2].weight.detach().numpy()[:] = np.random.randn(3, 6)
    torch.testing.assert_close(compiled(x), model(x), **TOL)
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_backward_through_a_compiled_graph_gets_eagers_gradients(python):
    code = CHECKED + """
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
compiled = torch.compile(model, backend="ember")
x = torch.randn(2, 4, requires_grad=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = compiled(x)
assert any(issubclass(w.category, EmberFallbackWarning) and "autograd" in str(w.message) for w in caught), caught
assert y.requires_grad
(y.sum() + x.sum()).backward()
grads = [x.grad] + [p.grad for p in model.parameters()]
x.grad = None
model.zero_grad(set_to_none=True)
(model(x).sum() + x.sum()).backward()
for got, want in zip(grads, [x.grad] + [p.grad for p in model.parameters()]):
    torch.testing.assert_close(got, want, **TOL)

with torch.no_grad(), warnings.catch_warnings():  # inference still runs in ember
    warnings.simplefilter("error", EmberFallbackWarning)
    torch.testing.assert_close(compiled(x), model(x), **TOL)
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_a_view_of_the_input_is_a_view(python):
    code = CHECKED + """
def transpose(x):
    return x.t()
def flat(x):
    return x.reshape(6)
def both(x):
    return torch.relu(x) * 2, x[1]
for fn in (transpose, flat, both):
    x = torch.randn(2, 3)
    out = torch.compile(fn, backend="ember")(x)
    torch.testing.assert_close(out, fn(x.clone()), **TOL)
    view = out[-1] if isinstance(out, tuple) else out
    view[(0,) * view.dim()] = 100.0  # writes into x, as eager's does
    assert (x == 100.0).sum() == 1, (fn.__name__, x)
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_a_dim_without_an_upper_bound(python):
    code = CHECKED + """
import ember
from ember.errors import EmberError
class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1
seq = torch.export.Dim("seq", min=2)
compiled = ember.compile(Twice(), example_inputs=(torch.randn(1, 5),), dynamic_shapes=({1: seq},))
for n in (2, 7, 300):
    x = torch.randn(1, n)
    torch.testing.assert_close(compiled(x), x * 2 + 1, **TOL)
try:
    compiled(torch.randn(1, 1))  # below the Dim's min
except EmberError as e:
    print(e)
else:
    raise AssertionError("a length below min was accepted")
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()
