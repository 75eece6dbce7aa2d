"""A built kernel's num_threads applies to its calls only: each call runs on that many OpenMP
threads and the calling thread's own setting (torch.set_num_threads, libgomp's
omp_get_max_threads) is what it was when the call returns, a call that raises included. The
threads a call ran on are counted in /proc/self/task: libgomp keeps the workers of a thread's
largest team so far, so a call on n threads (more than before on that thread) leaves n - 1 more.
Each case runs in a child process (`python` and `gomp_probe`, tests/conftest.py): libgomp's settings are per
process and per thread, and the test process's must not change."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")

TIMEOUT = 240

KERNELS = """
import threading
import numpy as np, ember
from ember import te
from ember.testing import random_array

A = te.placeholder((256, 64), name="A")
B = te.compute((256, 64), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
s = te.create_schedule(B.op)
s[B].parallel(s[B].op.axis[0])

def check(f):
    a, b = random_array((256, 64)), random_array((256, 64))
    f(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
"""


def test_num_threads_applies_to_the_call_and_leaves_the_callers_setting(python, gomp_probe):
    code = gomp_probe + KERNELS + """
torch.set_num_threads(4)
assert setting() == 4
one, two = ember.build(s, [A, B], num_threads=1), ember.build(s, [A, B], num_threads=2)
follows = ember.build(s, [A, B], num_threads=0)
assert "omp parallel" in one.source and setting() == 4  # building sets nothing
base = tasks()
check(one)
assert setting() == 4 and tasks() == base, (setting(), base, tasks())  # one thread: no worker
check(two)
assert setting() == 4 and tasks() == base + 1, (setting(), base, tasks())  # two threads: one worker
torch.set_num_threads(3)
check(follows)  # 0: the calling thread's setting
assert setting() == 3 and tasks() == base + 2, (setting(), base, tasks())
check(one)
check(two)
assert setting() == 3
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_num_threads_from_the_option_applies_on_every_thread(python, gomp_probe, monkeypatch):
    """EMBER_NUM_THREADS=1: a kernel called from a thread other than the one that built it runs on
    one thread too (libgomp's default there would be every core)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    code = gomp_probe + KERNELS + """
f = ember.build(s, [A, B])
assert f.num_threads == 1
seen = []
def worker():  # (libgomp's own calls only: torch's first call on a thread sets the thread's setting)
    before, default = tasks(), gomp.omp_get_max_threads()
    check(f)
    seen.append((tasks() - before, gomp.omp_get_max_threads() - default))
t = threading.Thread(target=worker)
t.start(); t.join()
assert seen == [(0, 0)], seen  # no worker started; the thread's default kept
print("ok")
"""
    python(code, env={"EMBER_NUM_THREADS": "1"}, timeout=TIMEOUT).assert_ok()


def test_a_call_that_raises_gives_the_setting_back(python, gomp_probe):
    """A checked kernel that divides by zero returns its status and raises; the calling thread's
    setting is back all the same."""
    code = gomp_probe + KERNELS + """
X = te.placeholder((64,), name="X", dtype="int32")
Y = te.compute((64,), lambda i: X[i] // X[i], name="Y")
sy = te.create_schedule(Y.op)
sy[Y].parallel(sy[Y].op.axis[0])
f = ember.build(sy, [X, Y], num_threads=2, checked=True)
torch.set_num_threads(3)
assert setting() == 3
x = np.random.default_rng().integers(1, 100, 64).astype("int32")
y = np.empty(64, "int32")
f(x, y)
assert (y == 1).all() and setting() == 3
x[5] = 0
try:
    f(x, y)
except ZeroDivisionError:
    pass
else:
    raise AssertionError("no ZeroDivisionError")
assert setting() == 3, setting()
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()
