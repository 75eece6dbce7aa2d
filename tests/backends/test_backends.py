"""Backends as registered objects (ember.backends): a target finds its backend by kind, an
unknown name is a ConfigError naming those there are, a registered backend is found by its name;
what a backend cannot do is a named error (the interpreter has no tile launcher and is not
tuned); a kernel built through each backend computes what NumPy computes."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import backends, te
from ember.backends.base import Backend
from ember.backends.c import CBackend
from ember.backends.cuda import CUDABackend
from ember.backends.python import PythonBackend
from ember.errors import ConfigError
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.runtime.model import CompiledModel
from ember.runtime.module import CKernel, PythonKernel
from ember.target import Target, as_target
from ember.testing import random_array
from ember.tune.task import task_from_tensors
from ember.tune.tuner import TaskTuner


def test_a_target_finds_its_backend_by_kind():
    assert isinstance(as_target("c").backend, CBackend) and as_target("c").backend is backends.get("c")
    assert isinstance(as_target("python").backend, PythonBackend)
    assert isinstance(as_target("cuda").backend, CUDABackend)
    assert as_target("c").backend.model is CompiledModel


def test_unknown_backend_names_the_known_ones():
    known = r"\['accel', 'c', 'cuda', 'python'\]"
    with pytest.raises(ConfigError, match=rf"no backend is registered for target 'tpu'; backends: {known}"):
        backends.get("tpu")


def test_a_registered_backend_is_found_by_name(monkeypatch):
    monkeypatch.setattr(backends, "_registry", dict(backends._registry))  # (the process's registry left as it was)

    class Echo(PythonBackend):
        name = "echo"

    echo = backends.register(Echo())
    assert isinstance(echo, Backend) and backends.get("echo") is echo


@pytest.mark.parametrize("target, kind", [("c", CKernel), ("python", PythonKernel)])
def test_a_kernel_built_through_each_backend(target, kind):
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 3 + 1, name="B")
    s = te.create_schedule(B.op)
    f = ember.build(s, [A, B], target=target)
    assert isinstance(f, kind)
    a, b = random_array((64,)), np.empty(64, "float32")
    f(a, b)
    np.testing.assert_allclose(b, a * 3 + 1, rtol=1e-6, atol=1e-6)


def test_what_the_interpreter_backend_refuses():
    python = as_target("python").backend
    with pytest.raises(ConfigError, match="launches no tile kernels"):
        python.open_launcher("", "k", as_target("python"))
    with pytest.raises(ConfigError, match="checked=True needs target 'c'"):
        python.check_options(checked=True)
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    with pytest.raises(ConfigError, match="target 'python' is not tuned"):
        TaskTuner(task_from_tensors([A, B]), runner=None, target=Target("python"))


def test_the_cuda_backend_refuses_checked_models_and_lowers_without_vectors():
    g = Graph("one")
    x = g.add_input("x", TensorType((4,)))
    g.set_outputs(add_op(g, "relu", [x]))
    with pytest.raises(ConfigError, match="CUDA kernels do not check divisions"):
        ember.compile(g, target="cuda", checked=True)
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(inner)
    assert "vectorized" in str(ember.lower(s, [A, B], target="cuda", skip=("vectorize",)))  # a loop CUDA C unrolls
    assert "vectorized" not in str(ember.lower(s, [A, B], target="c"))  # vector expressions


def test_a_large_model_is_several_translation_units_built_into_one_library(monkeypatch):
    import ember.backends.c
    from ember.runtime.build import UNIT_SEPARATOR

    g = Graph("units")
    x = g.add_input("x", TensorType((8, 16)))
    h, ref = x, lambda x: x
    for k, op in enumerate(("relu", "neg", "exp", "tanh")):  # four kernels of their own
        wk = random_array((16, 16)) / 4  # (products of order one: exp does not amplify fp32's rounding)
        (h,) = add_op(g, op, [add_op(g, "matmul", [h, g.add_constant(wk, f"w{k}")])[0]])
        ref = (lambda r, w, f: lambda x: f(r(x) @ w))(ref, wk.astype(np.float64), {
            "relu": lambda v: np.maximum(v, 0), "neg": np.negative, "exp": np.exp, "tanh": np.tanh}[op])
    g.set_outputs([h])
    monkeypatch.setattr(ember.backends.c, "UNIT_BYTES", 1)  # a unit per kernel, at most one per core
    cm = ember.compile(g, target=Target(cores=3))
    assert cm.source.count(UNIT_SEPARATOR) == 2
    data = random_array((8, 16))
    np.testing.assert_allclose(cm(data), ref(data.astype(np.float64)), rtol=1e-4, atol=1e-5)
