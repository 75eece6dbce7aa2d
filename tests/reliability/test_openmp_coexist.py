"""ember's OpenMP runtime next to torch in one process (ember.runtime.openmp): the process has one
libgomp (torch's when torch came first); the first libgomp ember loads itself gets a short spin
count unless the user chose a wait policy (its idle threads use next to no CPU after a call), without
leaving the variable in the environment; a
model's num_threads applies to its call and leaves the calling thread's setting (torch's
set_num_threads) as it was. Each case runs in a child process: libgomp reads its settings once per
process, and OMP_DISPLAY_ENV makes it print them when it starts."""

from __future__ import annotations

import pytest

TIMEOUT = 240

MODEL = """
import os, time, numpy as np, ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.runtime import openmp
from ember.testing import random_array
g = Graph("mm")
x = g.add_input("x", TensorType((128, 64)))
w = g.add_constant(random_array((64, 48)), "w")
g.set_outputs([add_op(g, "relu", [add_op(g, "matmul", [x, w])[0]])[0]])

def check(cm):
    a = random_array((128, 64))
    np.testing.assert_allclose(cm(a), np.maximum(a @ g.constants["w"], 0), rtol=1e-4, atol=1e-4)
"""


@pytest.fixture(autouse=True)
def no_wait_policy(monkeypatch):
    """The children start with no OpenMP wait policy of the user's unless a test gives one."""
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def _settings(stderr: str) -> dict[str, str]:
    """The variables libgomp printed when it started (OMP_DISPLAY_ENV=verbose)."""
    out = {}
    for line in stderr.splitlines():
        name, eq, value = line.strip().partition(" = ")
        if eq and name.replace("_", "").isalpha():
            out.setdefault(name, value.strip("'"))
    return out


def test_first_libgomp_gets_a_short_spin_count(python):
    code = MODEL + """
assert openmp.spin_count_set() is None and openmp.libgomp_path() is None  # nothing loaded by importing ember
cm = ember.compile(g, num_threads=2)
check(cm)
assert openmp.spin_count_set() is True, openmp.spin_count_set()
assert "GOMP_SPINCOUNT" not in os.environ  # set for the load only: children do not inherit it
assert len(os.listdir("/proc/self/task")) > 1  # the call ran a parallel region: a worker waits now

def idle_cpu(a):
    cm(a)
    t = time.process_time()
    time.sleep(0.02)
    return time.process_time() - t

a = random_array((128, 64))
idle = sorted(idle_cpu(a) for _ in range(5))
assert idle[2] < 1e-3, idle  # the worker sleeps within microseconds of a call (libgomp's own spin: 3-4 ms)
check(ember.compile(g, num_threads=2, opt_level=1))  # a second library: same runtime, nothing set again
print("ok")
"""
    run = python(code, env={"OMP_DISPLAY_ENV": "verbose"}, timeout=TIMEOUT)
    run.assert_ok()
    from ember.runtime.openmp import SPIN_COUNT

    assert _settings(run.stderr).get("GOMP_SPINCOUNT") == str(SPIN_COUNT), run.stderr
    assert run.stderr.count("OPENMP DISPLAY ENVIRONMENT BEGIN") == 1  # one libgomp, started once


@pytest.mark.parametrize("env, expected", [({"OMP_WAIT_POLICY": "active"}, {"OMP_WAIT_POLICY": "ACTIVE"}),
                                           ({"GOMP_SPINCOUNT": "1234"}, {"GOMP_SPINCOUNT": "1234"})])
def test_a_wait_policy_of_the_users_is_kept(python, env, expected):
    code = MODEL + """
check(ember.compile(g, num_threads=2))
assert openmp.spin_count_set() is False
print("ok")
"""
    run = python(code, env={"OMP_DISPLAY_ENV": "verbose", **env}, timeout=TIMEOUT)
    run.assert_ok()
    settings = _settings(run.stderr)
    assert all(settings.get(k) == v for k, v in expected.items()), run.stderr


def test_torch_first_one_openmp_runtime_torchs(python):
    """torch loaded first: ember's libraries run on torch's libgomp (one runtime, one pool of
    threads), whose settings ember leaves alone; ember's results equal torch's, through
    ember.compile and through torch.compile with a graph break and eager work between graphs."""
    code = """
import os, torch
""" + MODEL + """
torch.manual_seed(0)
torch_gomp = openmp.libgomp_path()
assert torch_gomp is not None and "torch" in torch_gomp, torch_gomp
check(ember.compile(g, num_threads=2))
assert openmp.libgomp_path() == torch_gomp and openmp.spin_count_set() is False
files = {line.split()[-1] for line in open("/proc/self/maps")}
mapped = {p for p in files if os.path.basename(p).startswith("libgomp")}
assert mapped == {torch_gomp}, mapped

@torch._dynamo.disable
def eager(t):
    return t + torch.tanh(t)

class Broken(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 96), torch.nn.Linear(96, 32)
    def forward(self, x):
        return self.b(eager(torch.relu(self.a(x))))

model = Broken().eval()
compiled = torch.compile(model, backend="ember")
with torch.no_grad():
    for _ in range(3):
        x = torch.randn(200, 64)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
print("ok")
"""
    run = python(code, env={"OMP_DISPLAY_ENV": "verbose"}, timeout=TIMEOUT)
    run.assert_ok()
    from ember.runtime.openmp import SPIN_COUNT

    assert _settings(run.stderr).get("GOMP_SPINCOUNT") != str(SPIN_COUNT), run.stderr  # torch's libgomp, as it started


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_num_threads_applies_to_the_call_and_leaves_torchs_setting(python, gomp_probe):
    """A model's num_threads runs its kernels on that many threads and the calling thread's
    OpenMP setting (torch.set_num_threads) is what it was after the call; a model of num_threads 0
    follows that setting."""
    code = gomp_probe + MODEL + """
torch.set_num_threads(1)
one = ember.compile(g, num_threads=1)
check(one)
base = tasks()  # no OpenMP worker yet: every parallel region ran on this thread
three = ember.compile(g, num_threads=3)
check(three)
assert tasks() == base + 2, (base, tasks())  # the call ran 3 threads: 2 workers started
assert setting() == 1
torch.set_num_threads(2)
check(one)
assert setting() == 2
follows = ember.compile(g)  # num_threads 0: the thread's own setting
check(follows)
assert setting() == 2
print("ok")
"""
    python(code, timeout=TIMEOUT).assert_ok()
