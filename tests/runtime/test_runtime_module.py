"""Kernels: building, loading, calling, one library for several kernels, threads, timing."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ember.errors import ConfigError
from ember.runtime.bench import BenchResult, bench
from ember.runtime.module import CKernel, PythonKernel, build_c, build_c_module, build_python
from ember.tir.expr import Buffer, Var, const
from ember.tir.stmt import BufferStore, For, PrimFunc

rng = np.random.default_rng(2)


@pytest.mark.parametrize("build", [build_c, build_python])
def test_kernel_computes_in_place(vadd, build):
    kernel = build(vadd)
    assert kernel.name == "vadd" and kernel.func is vadd and "vadd" in kernel.source
    a, b = rng.standard_normal(100).astype("float32"), rng.standard_normal(100).astype("float32")
    c = rng.standard_normal(100).astype("float32")
    assert kernel(a, b, c) is None
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


@pytest.mark.parametrize("build", [build_c, build_python])
def test_a_launcher_keeps_its_arrays_alive(vadd, build):
    kernel, c = build(vadd), np.full(1000, np.nan, "float32")
    a, b = rng.standard_normal((2, 1000)).astype("float32")
    launch = kernel.prepare(a.copy(), b.copy(), c)  # the copies have no other owner
    for _ in range(10):  # allocations that would reuse freed memory
        rng.standard_normal(1000).astype("float32")
    launch()
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


def test_kernel_types(vadd):
    assert isinstance(build_c(vadd), CKernel) and build_c(vadd).target == "c"
    python = build_python(vadd)
    assert isinstance(python, PythonKernel) and "def vadd(A, B, C, n):" in python.source


def test_multidimensional_arrays_are_passed_flat(vscale):
    x = rng.standard_normal((4, 8)).astype("float32")
    for kernel in (build_c(vscale), build_python(vscale)):
        y = np.zeros(32, "float32")
        kernel(x.reshape(32), y)
        np.testing.assert_allclose(y, x.reshape(32) * 3, rtol=1e-6)


def test_module_of_several_kernels_shares_one_library(vadd, vscale):
    kernels = build_c_module([vadd, vscale])
    assert set(kernels) == {"vadd", "vscale"}
    assert kernels["vadd"].library is kernels["vscale"].library
    assert kernels["vadd"].source == kernels["vscale"].source
    x, y = np.ones(16, "float32"), np.zeros(16, "float32")
    kernels["vscale"](x, y)
    assert (y == 3).all()


def test_num_threads_is_the_keyword_or_the_option(vadd, monkeypatch):
    """A kernel's calls ask its launcher for its num_threads (the keyword, else the option), the
    last argument; what a call does with them: test_kernel_threads.py."""
    a, b = rng.standard_normal(1000).astype("float32"), rng.standard_normal(1000).astype("float32")
    c = np.zeros(1000, "float32")
    monkeypatch.setenv("EMBER_NUM_THREADS", "1")
    one, two = build_c(vadd), build_c(vadd, num_threads=2)
    assert (one.num_threads, two.num_threads) == (1, 2)
    assert one.prepare(a, b, c).args[-1] == 1 and two.prepare(a, b, c).args[-1] == 2
    two(a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)
    two.num_threads = 3
    assert two.prepare(a, b, c).args[-1] == 3
    monkeypatch.setenv("EMBER_NUM_THREADS", "0")
    assert build_c(vadd).prepare(a, b, c).args[-1] == 0
    with pytest.raises(ConfigError, match="num_threads"):
        build_c(vadd, num_threads=-1)
    with pytest.raises(ConfigError, match="num_threads"):
        two.num_threads = "many"


def test_bench_times_the_kernel_without_argument_checks(vadd, monkeypatch):
    kernel = build_c(vadd)
    binds = []
    bind = kernel.signature.bind
    monkeypatch.setattr(kernel.signature, "bind", lambda arrays: binds.append(1) or bind(arrays))
    a = np.ones(256, "float32")
    result = kernel.bench(a, a, np.zeros(256, "float32"), repeat=5, min_time=0.01)
    assert isinstance(result, BenchResult) and binds == [1]
    assert len(result.times) == 5 and result.median > 0 and result.number >= 1
    assert min(result.times) <= result.median <= max(result.times)
    assert "median" in str(result)


def test_bench_calls_often_enough_to_measure():
    """Calls per measurement double until one measurement lasts min_time / repeat: a call of at
    least 1 ms reaches 10 ms by 16 calls."""
    result = bench(lambda: time.sleep(0.001), warmup=0, repeat=2, min_time=0.02)
    assert 1 <= result.number <= 16 and all(t >= 0.001 for t in result.times)


def test_bench_of_a_callable_with_fixed_number():
    calls = []
    result = bench(lambda x: calls.append(x), 7, warmup=3, repeat=4, number=5)
    assert calls == [7] * (3 + 4 * 5) and result.number == 5 and len(result.times) == 4
    with pytest.raises(ValueError, match="repeat"):
        bench(lambda: None, repeat=0)


def test_interpreter_wraps_integers_silently():
    n, i = Var("n"), Var("i")
    A, C = Buffer("A", (n,), "int8"), Buffer("C", (n,), "int8")
    f = PrimFunc("twice", (A, C), For(i, const(0), n, "serial", BufferStore(C, A[i] + A[i], (i,))))
    a, c = np.array([100, -100, 3], "int8"), np.zeros(3, "int8")
    with np.errstate(all="raise"):
        build_python(f)(a, c)
    assert c.tolist() == [-56, 56, 6]
