"""Specialization and caching of compiled tile kernels: a second launch with the same key
compiles nothing, in this process (the in-memory table) and in a new one (the disk cache); the
key changes with constexprs, dtypes and integers equal to 1 or divisible by 16."""

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
from ember.runtime import kept

tlaunch = sys.modules["ember.triton.compiler.launch"]

ROOT = Path(__file__).resolve().parents[2]


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_INTERPRET", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(tlaunch, "_table", {})
    return tmp_path


def run(n, block=64, dtype="float32", alpha=2.0):
    x = np.random.default_rng().random(n).astype(dtype)
    out = np.zeros_like(x)
    scale_kernel[(-(-n // block),)](x, out, n, alpha, BLOCK=block)
    np.testing.assert_allclose(out, x * np.asarray(alpha, dtype), rtol=1e-3)


def test_second_launch_compiles_nothing(cache):
    before = dict(tlaunch.stats)
    run(100)
    run(100)
    run(37)  # another size, same key
    assert tlaunch.stats["compiled"] - before["compiled"] == 1


def test_key_changes(cache):
    before = tlaunch.stats["compiled"]
    run(100)
    run(100, block=32)  # a constexpr
    run(100, dtype="float64")  # a dtype
    run(1)  # n == 1 is compiled in
    run(96)  # divisible by 16
    assert tlaunch.stats["compiled"] - before == 5


def test_new_process_compiles_nothing(cache):
    run(100)
    child = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import ember.runtime.build as build
        def refuse(*a, **k):
            raise SystemExit("the C compiler ran")
        build._compile = refuse
        from test_compile_cache import run
        launch = sys.modules["ember.triton.compiler.launch"]
        run(100)
        assert launch.stats == {{"compiled": 0, "loaded": 1}}, launch.stats
        print("ok")
    """)
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_ir_and_source(cache):
    x = np.ones(10, np.float32)
    ir = scale_kernel.ir(x, x, 10, 2.0, BLOCK=16)
    src = scale_kernel.source(x, x, 10, 2.0, BLOCK=16)
    assert "parallel" in ir and "omp parallel for" in src
    assert scale_kernel.compile(x, x, 10, 2.0, BLOCK=16).asm == {"tir": ir, "c": src}


def test_launch_in_a_child_of_fork(cache):
    run(5000)  # the parent starts OpenMP's threads
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_compile_cache import run
        run(5000)
        pid = os.fork()
        if pid == 0:
            run(5000)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("ok" if status == 0 else f"child status {{status}}")
    """)
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "ok", r.stderr


def entry(cache) -> Path:
    [path] = (cache / "triton").glob("*.pkl")
    return path


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign"])
def test_a_damaged_entry_is_compiled_again_and_written_over(cache, damage):
    """An entry whose bytes do not match its digest (a flipped byte inside the C source would have
    compiled altered code), or a whole one that is no description of this key (another writer's
    value), is a miss: compiled again, right, and written over, so the next process loads it."""
    run(100)
    path = entry(cache)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        at = data.index(b"alpha")  # (inside the C source's text)
        data[at] ^= 0x20
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[:len(data) // 2]))
    else:
        kept.write(path, ["not", "a", "kernel"])
    tlaunch._table.clear()
    before = dict(tlaunch.stats)
    run(100)
    assert tlaunch.stats["compiled"] - before["compiled"] == 1 and tlaunch.stats["loaded"] == before["loaded"]
    assert kept.read(path)["key"] == path.stem  # written over
    tlaunch._table.clear()
    run(100)
    assert tlaunch.stats["loaded"] == before["loaded"] + 1
