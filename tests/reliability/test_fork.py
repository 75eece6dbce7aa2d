"""Native code in children of fork: a model, a built kernel or an ember.triton launch run in the
parent (so libgomp has a pool of OpenMP threads there) runs in forked children too, through
multiprocessing.Pool (the fork start method, several tasks per child) and os.fork(), with correct
results; on the forking thread it runs with one OpenMP thread, on a thread the child starts with
the model's threads (ember.runtime.fork). Each case runs in a child process whose timeout turns a
hang into a failure."""

from __future__ import annotations

import pytest

TIMEOUT = 120  # seconds; a hang in libgomp would wait forever

# Runs `check(i)` (a function of __main__: the Pool pickles it by name) in the parent, in a fork Pool
# of 2 processes (6 tasks) and in an os.fork() child.
FORK_DRIVER = """
import multiprocessing, os
def run_everywhere(check):
    check(0)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(check, range(6)) == [True] * 6
    pid = os.fork()
    if pid == 0:
        try:
            check(7)
            os._exit(0)
        except BaseException as e:
            print("child:", repr(e), flush=True)
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0
    print("ok")
"""

# The thread-count tests count the process's threads: NumPy's OpenBLAS, whose products check the
# results, starts a pool of its own in a child on its first product, so it runs on the calling thread.
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1"}

GRAPH_MODEL = """
import numpy as np, ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.testing import random_array
g = Graph("mm")
x = g.add_input("x", TensorType((256, 64)))
w = g.add_constant(random_array((64, 48)), "w")
g.set_outputs([add_op(g, "relu", [add_op(g, "matmul", [x, w])[0]])[0]])
cm = ember.compile(g, num_threads=2)

def check_model(model, i):
    x = random_array((256, 64))
    np.testing.assert_allclose(model(x), np.maximum(x @ g.constants["w"], 0), rtol=1e-4, atol=1e-4)
    return True
"""


def test_compiled_model_runs_in_fork_children(python):
    code = GRAPH_MODEL + FORK_DRIVER + """
def check(i):
    return check_model(cm, i)

run_everywhere(check)
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_loaded_model_runs_in_fork_children(python, tmp_path):
    code = GRAPH_MODEL + FORK_DRIVER + f"""
loaded = ember.load(cm.save({str(tmp_path / "mm.ember")!r}))

def check(i):
    return check_model(loaded, i)

run_everywhere(check)
"""
    python(code, timeout=TIMEOUT).assert_ok()


def test_built_kernel_runs_in_fork_children(python):
    code = FORK_DRIVER + """
import numpy as np, ember
from ember import te
from ember.testing import random_array
A = te.placeholder((512, 64), name="A")
B = te.compute((512, 64), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
s = te.create_schedule(B.op)
s[B].parallel(s[B].op.axis[0])
f = ember.build(s, [A, B], target="c")
assert "omp parallel" in f.source

def check(i):
    a, b = random_array((512, 64)), np.empty((512, 64), "float32")
    f(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    return True

run_everywhere(check)
"""
    python(code, env={"EMBER_NUM_THREADS": "2"}, timeout=TIMEOUT).assert_ok()


def test_tile_kernel_runs_in_fork_children(python, tmp_path):
    """An ember.triton launch too (its launcher asks for one thread on the forking thread)."""
    (tmp_path / "tile_kernels.py").write_text(
        "import ember.triton as triton\nimport ember.triton.language as tl\n\n\n"
        "@triton.jit\ndef affine(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0 + 1.0, mask=offs < n)\n")
    code = FORK_DRIVER + f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
import numpy as np
from ember.testing import random_array
from tile_kernels import affine

def check(i):
    x = random_array((4096,))
    out = np.empty_like(x)
    affine[(64,)](x, out, x.size, BLOCK=64)
    np.testing.assert_allclose(out, x * 2 + 1, rtol=1e-6)
    return True

run_everywhere(check)
"""
    python(code, env={"EMBER_NUM_THREADS": "2", "EMBER_INTERPRET": "0", "TRITON_INTERPRET": "0"},
               timeout=TIMEOUT).assert_ok()


def test_torch_model_runs_in_fork_children(python):
    code = FORK_DRIVER + """
import numpy as np, torch, ember
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32)).eval()
cm = ember.compile(model, example_inputs=(torch.randn(128, 64),), num_threads=2)

def check(i):
    x = torch.randn(128, 64)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), model(x), rtol=1e-4, atol=1e-4)
    return True

run_everywhere(check)
"""
    python(code, timeout=TIMEOUT).assert_ok()


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_fork_child_thread_counts(python):
    """On the forking thread the child runs one OpenMP thread (no worker is started); a thread
    the child starts gets a pool of its own and the model's 2 threads."""
    code = GRAPH_MODEL + """
import os, threading
tasks = lambda: len(os.listdir("/proc/self/task"))
check_model(cm, 0)
pid = os.fork()
if pid == 0:
    check_model(cm, 1)
    main = tasks()
    seen = []
    def worker():
        check_model(cm, 2)
        seen.append(tasks())
    t = threading.Thread(target=worker)
    t.start(); t.join()
    print("threads", main, seen[0], flush=True)
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
"""
    run = python(code, env=ONE_BLAS_THREAD, timeout=TIMEOUT)
    assert run.returncode == 0, str(run)
    assert "threads 1 3" in run.stdout, str(run)  # main alone; thread + its one OpenMP worker


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_fork_before_openmp_keeps_threads(python):
    """A parent that never loaded libgomp (a forkserver, like the tuner's) leaves no stale pool:
    its child runs the model with the model's 2 threads on its main thread."""
    code = """
import os
gomp = lambda: any("libgomp" in line for line in open("/proc/self/maps"))
import ember
assert not gomp(), "importing ember loaded libgomp"
pid = os.fork()
if pid == 0:
""" + "\n".join("    " + line for line in GRAPH_MODEL.splitlines()) + """
    check_model(cm, 0)
    print("threads", len(os.listdir("/proc/self/task")), flush=True)
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
"""
    run = python(code, env=ONE_BLAS_THREAD, timeout=TIMEOUT)
    assert run.returncode == 0, str(run)
    assert "threads 2" in run.stdout, str(run)  # main + its one OpenMP worker
