"""The compiled call path (ember.runtime.fastcall): the same results, checks and errors as the
Python path, fresh outputs, torch in and out, symbolic sizes and their ranges, many threads on
one model, and the Python path when the extension is off or cannot be built."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

from ember.compiler import compile_graph
from ember.errors import ArgumentTypeError, ShapeError
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.runtime import fastcall
from ember.testing import random_array

RTOL, ATOL = 1e-6, 1e-6
ROOT = Path(__file__).resolve().parents[2]


def symbolic_graph() -> Graph:
    """x: (n, 4), y: (n + 1, 4) -> (x * x, concat(x, y) of 2*n + 1 rows); n in [1, 50]."""
    g = Graph("sym")
    x, y = g.add_input("x", TensorType(("n", 4))), g.add_input("y", TensorType(("n + 1", 4)))
    g.set_outputs([add_op(g, "mul", [x, x])[0], add_op(g, "concat", [x, y], {"axis": 0})[0]])
    g.ranges["n"] = (1, 50)
    return g


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The symbolic model compiled once; a twin of it on the Python path (fast_call off)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    fast, slow = (compile_graph(symbolic_graph(), num_threads=1) for _ in range(2))
    for cm, option in ((fast, "1"), (slow, "0")):
        mp.setenv("EMBER_FAST_CALL", option)
        assert cm._fast is fastcall.not_yet
        for _ in range(2):  # the second call makes the C path (or not: fast_call off)
            cm(random_array((2, 4)), random_array((3, 4)))
        cm(torch.rand(2, 4), torch.rand(3, 4))  # the C path takes torch tensors from now on
    mp.undo()
    assert fastcall.extension() is not None, "the call extension did not build on this machine"
    assert fast._fast is not fastcall.no_fast_path and slow._fast is fastcall.no_fast_path
    return fast, slow


def reference(x, y):
    return [x * x, np.concatenate([x, y])]


def check(outs, expected):
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected):
        np.testing.assert_allclose(np.asarray(o), e, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n", [1, 7, 50])
def test_results_and_sizes_match_numpy(models, n):
    fast, _ = models
    x, y = random_array((n, 4)), random_array((n + 1, 4))
    assert fast._fast((x, y), 1) is not NotImplemented  # taken by the C path
    outs = fast(x, y)
    assert all(type(o) is np.ndarray and o.flags.c_contiguous and o.flags.writeable for o in outs)
    assert outs[1].shape == (2 * n + 1, 4)
    check(outs, reference(x, y))


def test_outputs_are_fresh_arrays(models):
    fast, _ = models
    x, y = random_array((3, 4)), random_array((4, 4))
    first, second = fast(x, y), fast(x, y)
    for a, b in zip(first, second):
        assert not np.shares_memory(a, b)
        assert not np.shares_memory(a, x) and not np.shares_memory(a, y)
    first[0][...] = 0  # the caller owns its outputs: the next call is unaffected
    check(fast(x, y), reference(x, y))


BAD = [
    (lambda: [random_array((2, 4))], ArgumentTypeError, r"takes 2 input\(s\) \(x, y\), got 1"),
    (lambda: [random_array((2, 4), "float64"), random_array((3, 4))], ArgumentTypeError,
     "input 'x' has dtype float64, expected float32"),
    (lambda: [[1.0] * 4, random_array((3, 4))], ArgumentTypeError,
     r"input 1 \('x'\) must be a numpy.ndarray or a CPU torch.Tensor, got list"),
    (lambda: [random_array((2, 4)), torch.rand(3, 4, dtype=torch.float64)], ArgumentTypeError,
     "input 'y' has dtype torch.float64, expected float32"),
    (lambda: [random_array((2, 4, 1)), random_array((3, 4))], ShapeError,
     r"input 'x' has 3 dimension\(s\), expected 2 \(shape \(n, 4\)\)"),
    (lambda: [random_array((2, 5)), random_array((3, 4))], ShapeError, "input 'x' dimension 1: expected 4, got 5"),
    (lambda: [random_array((2, 4)), random_array((4, 4))], ShapeError,
     r"input 'y' dimension 0 is 4, expected n \+ 1 = 3"),
    (lambda: [random_array((51, 4)), random_array((52, 4))], ShapeError,
     r"input 'x' dimension 0 is 51, which binds 'n' outside the range \[1, 50\]"),
    (lambda: [random_array((0, 4)), random_array((1, 4))], ShapeError, "outside the range"),
    (lambda: [torch.rand(2, 4, device="meta"), random_array((3, 4))], ArgumentTypeError, "is a meta tensor"),
    (lambda: [torch.rand(2, 4).to_sparse(), torch.rand(3, 4)], ArgumentTypeError,
     r"input 'x' has layout torch.sparse_coo; ember takes dense \(strided\) tensors, pass x.to_dense\(\)"),
    (lambda: [torch.rand(2, 4), torch.rand(3, 4).to_mkldnn()], ArgumentTypeError, "input 'y' has layout torch._mkldnn"),
    (lambda: [torch.rand(2, 4), torch.rand(3, 4, dtype=torch.float16)], ArgumentTypeError,
     "input 'y' has dtype torch.float16, expected float32"),
    (lambda: [torch.rand(2, 4), torch.rand(4, 4)], ShapeError, r"input 'y' dimension 0 is 4, expected n \+ 1 = 3"),
]


@pytest.mark.parametrize("inputs, error, message", BAD)
def test_every_check_raises_the_python_paths_error_before_native_code(models, inputs, error, message):
    fast, slow = models
    args = inputs()
    assert fast._fast(tuple(args), 1) is NotImplemented  # refused in C, before the entry
    with pytest.raises(error, match=message) as got:
        fast(*args)
    with pytest.raises(error) as want:
        slow(*args)
    assert str(got.value) == str(want.value)


def test_copies_are_made_by_the_python_path(models):
    """Inputs the C path does not take as they are (not C-contiguous, another byte order, a
    subclass) are copied by the Python path, with the same results."""
    fast, _ = models
    x, y = random_array((4, 3)).T, random_array((4, 4))
    assert fast._fast((x, y), 1) is NotImplemented
    check(fast(x, y), reference(x, y))
    be = random_array((3, 4)).astype(">f4")
    with pytest.raises(ArgumentTypeError, match="has dtype >f4, expected float32"):
        fast(be, random_array((4, 4)))


def test_torch_in_torch_out(models):
    fast, slow = models
    x, y = torch.rand(5, 4), torch.rand(6, 4, requires_grad=True)
    assert fast._fast((x, y), 1) is not NotImplemented  # taken by the C path
    outs = fast(x, y)
    assert all(type(o) is torch.Tensor and not o.requires_grad for o in outs)
    check([o.numpy() for o in outs], reference(x.numpy(), y.detach().numpy()))
    mixed = fast(x.numpy(), y)  # any torch input: torch outputs
    assert all(isinstance(o, torch.Tensor) for o in mixed)
    check([o.numpy() for o in slow(x, y)], reference(x.numpy(), y.detach().numpy()))


def test_torch_views_the_c_path_cannot_take_go_through_python(models):
    fast, _ = models
    base = torch.rand(3, 4)
    for x in (torch.rand(4, 3).T, base._neg_view(), torch.nn.Parameter(torch.rand(3, 4))):
        y = torch.rand(4, 4)
        expected = reference(x.detach().resolve_neg().numpy(), y.numpy())
        if x.__class__ is torch.Tensor and not x.is_contiguous() or x.is_neg():
            assert fast._fast((x, y), 1) is NotImplemented
        check([o.numpy() for o in fast(x, y)], expected)


def test_many_threads_on_one_model(models):
    fast, _ = models
    errors = []

    def work(seed: int):
        rng = np.random.default_rng(seed)
        try:
            for k in range(30):
                n = 1 + (seed * 7 + k * 13) % 50  # sizes differ: layouts and workspaces at once
                x, y = random_array((n, 4), rng=rng), random_array((n + 1, 4), rng=rng)
                if k % 3 == 0:
                    check([o.numpy() for o in fast(torch.from_numpy(x), torch.from_numpy(y))], reference(x, y))
                else:
                    check(fast(x, y), reference(x, y))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert 1 <= fast._fast.pooled() <= 8  # a workspace per concurrent call, kept for the next ones


def test_integer_division_by_zero_raises_in_checked_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    g = Graph("div")
    a, b = g.add_input("a", TensorType((8,), "int32")), g.add_input("b", TensorType((8,), "int32"))
    g.set_outputs([add_op(g, "floor_divide", [a, b])[0]])
    cm = compile_graph(g, checked=True)
    a_, b_ = np.arange(1, 9, dtype=np.int32), np.arange(2, 10, dtype=np.int32)
    for _ in range(2):
        np.testing.assert_array_equal(cm(a_, b_), a_ // b_)
    b_[3] = 0
    assert cm._fast is not fastcall.not_yet
    with pytest.raises(ZeroDivisionError, match="integer division or modulo by zero in kernel"):
        cm._fast((a_, b_), 0)  # raised by the C path itself
    with pytest.raises(ZeroDivisionError, match="integer division or modulo by zero in kernel"):
        cm(a_, b_)


def test_a_model_is_freed_when_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    cm = compile_graph(symbolic_graph())
    for _ in range(3):
        cm(random_array((2, 4)), random_array((3, 4)))
    assert cm._fast is not fastcall.not_yet
    dropped = weakref.ref(cm)
    del cm
    gc.collect()
    assert dropped() is None


def test_children_of_fork_call_through_the_c_path(tmp_path):
    """A Pool worker forked after the parent ran the model on the C path (and libgomp) runs it
    there too, on one OpenMP thread from the forking thread, without hanging."""
    code = textwrap.dedent("""
        import multiprocessing as mp
        import numpy as np
        from ember.compiler import compile_graph
        from ember.graph import Graph, TensorType
        from ember.ops.nodes import add_op
        from ember.runtime import fastcall
        g = Graph("add")
        x, y = g.add_input("x", TensorType(("n", 64))), g.add_input("y", TensorType(("n", 64)))
        g.set_outputs([add_op(g, "add", [x, y])[0]])
        cm = compile_graph(g, num_threads=2)
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((2, 300, 64), dtype=np.float32)
        for _ in range(3):
            np.testing.assert_allclose(cm(a, b), a + b, rtol=1e-6)
        assert cm._fast not in (fastcall.not_yet, fastcall.no_fast_path)

        def work(k):
            return float(np.abs(cm(a[k:], b[k:]) - (a[k:] + b[k:])).max()), cm._fast((a, b), 2) is not NotImplemented

        with mp.get_context("fork").Pool(2) as pool:
            print(pool.map(work, range(4)))
    """)
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str([(0.0, True)] * 4)


def test_python_path_when_python_h_is_missing(tmp_path):
    """No Python.h (a Python without its headers): the model is called through the Python path
    (in a child process: the extension is loaded once per process)."""
    code = textwrap.dedent("""
        import numpy as np
        from ember.runtime import fastcall
        fastcall.python_include = lambda: "/nonexistent/include"
        from ember.compiler import compile_graph
        from ember.graph import Graph, TensorType
        from ember.ops.nodes import add_op
        g = Graph("add")
        x, y = g.add_input("x", TensorType(("n",))), g.add_input("y", TensorType(("n",)))
        g.set_outputs([add_op(g, "add", [x, y])[0]])
        cm = compile_graph(g)
        a, b = np.random.default_rng(0).standard_normal((2, 5), dtype=np.float32)
        for _ in range(3):
            np.testing.assert_allclose(cm(a, b), a + b, rtol=1e-6)
        assert fastcall.extension() is None and cm._fast is fastcall.no_fast_path
        try:
            cm(a, b[:4])
        except Exception as e:
            print(type(e).__name__, e)
    """)
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "ShapeError input 'y' dimension 0 is 4, but input 'x' dimension 0 is 5" in run.stdout
