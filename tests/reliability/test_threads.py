"""ember from several threads at once: compiling torch modules (torch.export is serialized by the
frontend's trace lock), torch.compile with backend="ember" (registered once, each graph compiled
once per shape), and calling one CompiledModel. Races are caught by repeating each case a few
times with a barrier in front of the racing calls; the torch cases run in a child process (a
corrupted tracer state must not leak into other tests) whose timeout turns a deadlock into a
failure. Every result is compared with torch eager or NumPy, and ember falling back to PyTorch
is an error."""

from __future__ import annotations

import threading

import numpy as np

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.testing import random_array

TIMEOUT = 240

# in_threads(n, fn): fn(k) in n threads released together; every exception is reported.
THREADS = """
import threading, warnings, torch, ember
from ember.torch_backend import EmberFallbackWarning
warnings.simplefilter("error", EmberFallbackWarning)
torch.manual_seed(0)

def in_threads(n, fn):
    errors, barrier = [], threading.Barrier(n)
    def run(k):
        try:
            barrier.wait()
            fn(k)
        except BaseException as e:
            errors.append(f"thread {k}: {type(e).__name__}: {e}")
    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

def mlp(k):
    return torch.nn.Sequential(torch.nn.Linear(8, 8 + k), torch.nn.ReLU(), torch.nn.Linear(8 + k, 4)).eval()

TOL = dict(rtol=1e-4, atol=1e-4)
"""


def test_compile_torch_modules_in_threads(python):
    code = THREADS + """
def compile_one(k):
    model, x = mlp(k), torch.randn(3, 8)
    cm = ember.compile(model, example_inputs=(x,))
    y = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(cm(y), model(y), **TOL)
    assert not model.training  # the module was in eval mode, and left so

for n in (2, 2, 4):
    in_threads(n, compile_one)
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_torch_compile_backend_in_threads(python):
    code = THREADS + """
from torch._dynamo.backends.registry import _COMPILER_FNS
from ember.torch_backend import ember_backend
assert _COMPILER_FNS.get("ember") is ember_backend  # registered at import: the threads' lookups only read

def compile_and_call(k):
    model = mlp(k)
    compiled = torch.compile(model, backend="ember")
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), **TOL)

for n in (2, 2):
    in_threads(n, compile_and_call)
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_compiled_module_first_called_from_threads(python):
    """Static shapes (Dynamo compiles under its lock) and dynamic ones (ember compiles each new
    shape on its first call, in the calling thread): each round's shapes are new."""
    code = THREADS + """
model = mlp(0)
static = torch.compile(mlp(1), backend="ember")
dynamic = torch.compile(model, backend="ember", dynamic=True)

def call(compiled, reference, batch):
    x = torch.randn(batch, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), reference(x), **TOL)

in_threads(4, lambda k: call(static, static._orig_mod, 6))
for first in (2, 5):
    in_threads(4, lambda k: call(dynamic, model, first + k % 2))  # two threads per new shape
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_backend_found_by_name_in_a_fresh_process(python):
    """torch loads the entry point on the first lookup of "ember" and registers it itself: the
    registration ember does when its backend module is imported must stay out of the way."""
    code = """
import warnings, torch
warnings.filterwarnings("error", message="ember cannot compile")
model = torch.nn.Linear(8, 3).eval()
x = torch.randn(2, 8)
with torch.no_grad():
    torch.testing.assert_close(torch.compile(model, backend="ember")(x), model(x), rtol=1e-4, atol=1e-4)
import ember.torch_backend as backend
from torch._dynamo.backends.registry import lookup_backend
backend.register()  # again: nothing happens
assert lookup_backend("ember") is backend.ember_backend
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_one_compiled_model_called_from_threads():
    """CompiledModel is documented as safe to call from several threads at once: each thread
    its own workspace, sizes bound per call (here a symbolic batch, different in every call)."""
    g = Graph("mlp")
    x = g.add_input("x", TensorType(("n", 32)))
    w = g.add_constant(random_array((32, 24)), "w")
    b = g.add_constant(random_array((24,)), "b")
    g.set_outputs([add_op(g, "relu", [add_op(g, "add", [add_op(g, "matmul", [x, w])[0], b])[0]])[0]])
    cm = ember.compile(g)
    errors, barrier = [], threading.Barrier(6)

    def run(k):
        try:
            barrier.wait()
            for step in range(20):
                a = random_array((1 + (k * 7 + step) % 33, 32))
                np.testing.assert_allclose(cm(a), np.maximum(a @ g.constants["w"] + g.constants["b"], 0),
                                           rtol=1e-4, atol=1e-4)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(f"thread {k}: {e!r}")

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
