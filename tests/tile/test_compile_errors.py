"""Errors of compiled tile kernels: unsupported constructs name the kernel's file and line, wrong
arguments fail before native code, the debug mode catches out-of-bounds accesses, and
device_assert / device_print work."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ember.triton as triton
import ember.triton.language as tl
from ember.errors import ArgumentTypeError, EmberError, TileError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_INTERPRET", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@triton.jit
def with_kernel(x_ptr):
    with open("f"):
        tl.store(x_ptr, 1.0)


@triton.jit
def early_return_kernel(x_ptr, n):
    return
    tl.store(x_ptr, 1.0)


@triton.jit
def python_call_kernel(x_ptr):
    v = tl.load(x_ptr)
    tl.store(x_ptr, sorted(v))


def test_unsupported_constructs_name_the_line():
    x = np.zeros(4, np.float32)
    with pytest.raises(TileError, match=r"test_compile_errors.py:\d+ \(in with_kernel\): with open") as e:
        with_kernel[(1,)](x)
    assert issubclass(e.type, EmberError)
    with pytest.raises(TileError, match="early `return`"):
        early_return_kernel[(1,)](x, 4)
    with pytest.raises(TileError, match=r"sorted.*Python function"):
        python_call_kernel[(1,)](x)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))  # unmasked: the last block runs past n


def test_wrong_arguments_fail_before_native_code():
    x = np.zeros(8, np.float32)
    with pytest.raises(ArgumentTypeError, match="copy_kernel"):
        copy_kernel[(1,)](x, x, BLOCK=8)
    with pytest.raises(ArgumentTypeError, match="'out_ptr'"):
        copy_kernel[(1,)](x, object(), 8, BLOCK=8)
    with pytest.raises(ArgumentTypeError, match="complex64"):
        copy_kernel[(1,)](x, np.zeros(8, np.complex64), 8, BLOCK=8)


def test_debug_mode_catches_out_of_bounds(monkeypatch):
    n = 100
    x = np.random.default_rng().random(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    monkeypatch.setenv("EMBER_TRITON_DEBUG", "1")
    where = r"tl.(load|store) out of the bounds of argument '(x|out)_ptr'.*test_compile_errors.py:\d+"
    with pytest.raises(TileError, match=where):
        copy_kernel[(2,)](x, out, n, BLOCK=64)
    np.testing.assert_array_equal(out[:64], x[:64])  # the accesses in bounds ran


@triton.jit
def assert_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.device_assert(x < 0.5, "x is too large")


def test_device_assert():
    x = np.full(10, 0.25, np.float32)
    assert_kernel[(1,)](x, 10, BLOCK=16)
    x[3] = 0.75
    with pytest.raises(TileError, match="device_assert failed: x is too large"):
        assert_kernel[(1,)](x, 10, BLOCK=16)


@triton.jit
def print_kernel(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 2))
    tl.device_print("x=", x)


def test_device_print(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import numpy as np
        from test_compile_errors import print_kernel
        print_kernel[(1,)](np.array([1.5, 2.5], np.float32))
    """)
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "x=0 0 0 0 1.500000" in r.stdout and "x=0 0 0 1 2.500000" in r.stdout, r.stdout
