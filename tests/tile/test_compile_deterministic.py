"""The C of a tile kernel depends on the kernel alone: compiled again after other kernels, in this
process and in a new one (another string hash seed), it is the same text; and it still computes
what NumPy does."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ember.triton as triton
import ember.triton.compiler.launch  # noqa: F401 - the module, not the function of the same name
import ember.triton.language as tl

tlaunch = sys.modules["ember.triton.compiler.launch"]

ROOT = Path(__file__).resolve().parents[2]


@triton.jit
def mixed_kernel(x_ptr, w_ptr, out_ptr, n, flip, BLOCK: tl.constexpr, K: tl.constexpr):
    """Temporaries of many kinds: masked loads, an if merging two names, a row sum, a dot."""
    rows = tl.arange(0, BLOCK)
    ks = tl.arange(0, K)
    x = tl.load(x_ptr + rows[:, None] * K + ks[None, :], mask=rows[:, None] < n, other=0.0)
    w = tl.load(w_ptr + ks[:, None] * K + ks[None, :])
    if flip:
        a, b = -x, x * 2.0
    else:
        a, b = x, x * 3.0
    acc = tl.dot(a, w) + tl.sum(b, axis=1)[:, None]
    tl.store(out_ptr + rows[:, None] * K + ks[None, :], acc, mask=rows[:, None] < n)


@triton.jit
def other_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, tl.cumsum(x, 0) + tl.max(x, 0), mask=offs < n)


def mixed_source(n=20) -> str:
    x = np.ones((32, 16), np.float32)
    return mixed_kernel.source(x, x, x, n, 1, BLOCK=32, K=16)


def fresh(monkeypatch, path: Path) -> None:
    """Nothing compiled before, in memory or on disk: the next source is generated anew."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(path))
    monkeypatch.setattr(tlaunch, "_table", {})


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    monkeypatch.delenv("EMBER_INTERPRET", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_same_source_after_other_kernels_and_in_a_new_process(tmp_path, monkeypatch):
    fresh(monkeypatch, tmp_path / "first")
    first = mixed_source()
    x = np.ones(100, np.float32)
    other_kernel.source(x, x, 100, BLOCK=64)
    other_kernel.source(x.astype(np.float64), x.astype(np.float64), 100, BLOCK=32)
    mixed_source(n=32)  # another specialization of the same kernel (n % 16 == 0)
    fresh(monkeypatch, tmp_path / "again")
    assert mixed_source() == first
    child = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_compile_deterministic import mixed_source
        sys.stdout.write(mixed_source())
    """)
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path / "child"), "PYTHONPATH": str(ROOT),
           "PYTHONHASHSEED": "12345"}
    r = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == first


@pytest.mark.parametrize("flip", [0, 1])
def test_mixed_kernel_against_numpy(tmp_path, monkeypatch, flip):
    fresh(monkeypatch, tmp_path)
    rng = np.random.default_rng()
    n = 27
    x = rng.standard_normal((32, 16)).astype(np.float32)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    out = np.zeros((32, 16), np.float32)
    mixed_kernel[(1,)](x, w, out, n, flip, BLOCK=32, K=16)
    xs = x[:n].astype(np.float64)
    a, b = (-xs, 2 * xs) if flip else (xs, 3 * xs)
    np.testing.assert_allclose(out[:n], a @ w + b.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(out[n:], 0)
