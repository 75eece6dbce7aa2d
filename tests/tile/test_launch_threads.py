"""A compiled tile kernel's launch runs its grid on the num_threads option's OpenMP threads and
leaves the calling thread's own setting (torch.set_num_threads, libgomp's omp_get_max_threads)
as it was, a launch whose device_assert fails included. Threads are counted in /proc/self/task
(libgomp keeps the workers of a thread's largest team so far). Each case runs in a child process
(`python` and `gomp_probe`, tests/conftest.py) that imports the kernels from this file: libgomp's settings are per
process and per thread, and the test process's must not change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ember.triton as triton
import ember.triton.language as tl

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")

TIMEOUT = 240


@pytest.fixture(autouse=True)
def _compiled(tmp_path, monkeypatch):
    """The children compile (a fresh build cache) rather than interpret."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("EMBER_INTERPRET", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@triton.jit
def affine_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.device_assert(x < 2.0, "x is too large", mask=mask)
    tl.store(out_ptr + offs, x * 2.0 + 1.0, mask=mask)


CHILD = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import numpy as np
from ember.errors import TileError
from test_launch_threads import affine_kernel

def launch(x):
    out = np.empty_like(x)
    affine_kernel[(triton.cdiv(x.size, 64),)](x, out, x.size, BLOCK=64)
    np.testing.assert_allclose(out, x * 2 + 1, rtol=1e-6)

import ember.triton as triton
rng = np.random.default_rng()
x = rng.random(1 << 15).astype("float32")  # 512 programs: enough work to run in parallel
torch.set_num_threads(4)
assert setting() == 4
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_launch_runs_on_num_threads_and_leaves_the_callers_setting(python, gomp_probe, threads):
    code = gomp_probe + CHILD + f"""
base = tasks()
launch(x)  # compiled, then launched on {threads} threads: {threads - 1} worker(s)
assert setting() == 4 and tasks() == base + {threads - 1}, (setting(), base, tasks())
torch.set_num_threads(3)
assert setting() == 3
launch(rng.random(1 << 15).astype("float32"))
assert setting() == 3 and tasks() == base + {threads - 1}, (setting(), base, tasks())
print("ok")
"""
    python(code, env={"EMBER_NUM_THREADS": str(threads)}, timeout=TIMEOUT).assert_ok()


def test_launch_starts_num_threads_workers(python, gomp_probe):
    """On a thread whose setting is one thread, a launch with num_threads 2 starts one worker
    (the grid ran on 2 threads); with num_threads 0 it follows the setting and starts none."""
    code = gomp_probe + CHILD + """
torch.set_num_threads(1)
assert setting() == 1
base = tasks()
os.environ["EMBER_NUM_THREADS"] = "0"  # read at each launch
launch(x)
assert setting() == 1 and tasks() == base, (setting(), base, tasks())
os.environ["EMBER_NUM_THREADS"] = "2"
launch(x)
assert setting() == 1 and tasks() == base + 1, (setting(), base, tasks())
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_failed_device_assert_gives_the_setting_back(python, gomp_probe):
    code = gomp_probe + CHILD + """
bad = x.copy()
bad[700] = 3.0
try:
    launch(bad)
except TileError as e:
    assert "x is too large" in str(e), e
else:
    raise AssertionError("no TileError")
assert setting() == 4, setting()
print("ok")
"""
    python(code, env={"EMBER_NUM_THREADS": "2"}, timeout=TIMEOUT).assert_ok()
