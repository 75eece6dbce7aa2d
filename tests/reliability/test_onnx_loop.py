"""An ONNX Loop of many iterations, run as a user runs it (a child process, the default thread
count): its small body kernels enter no OpenMP parallel region per iteration (a region's fork and
join cost up to milliseconds on a busy machine: a million iterations took 17 minutes), and a
Ctrl-C (SIGINT) stops a loop of 10^15 iterations with KeyboardInterrupt, the model still usable
afterwards (only SIGKILL used to stop it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TIMEOUT = 240

# loop_model(): y = Loop(n, x) with s <- s * 0.5 + x, from s = x: a body of one 4-element kernel
LOOP = """
import numpy as np, onnx
from onnx import TensorProto as T, helper, numpy_helper
import ember

def loop_model():
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Mul", ["s", "half"], ["h"]),
         helper.make_node("Add", ["h", "x"], ["s_out"])],
        "body", [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("s", T.FLOAT, [4])],
        [vi("c_out", T.BOOL, []), vi("s_out", T.FLOAT, [4])])
    graph = helper.make_graph([helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)], "loop",
                              [vi("n", T.INT64, []), vi("x", T.FLOAT, [4])], [vi("y", T.FLOAT, [4])],
                              [numpy_helper.from_array(np.array(0.5, "float32"), "half")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
"""


def test_a_million_iterations_with_the_default_threads(python):
    code = LOOP + """
import time
cm = ember.compile(loop_model())
assert "omp parallel" not in cm.source, "a 4-element kernel runs in a parallel region"
x = np.random.default_rng().uniform(-2, 2, 4).astype("float32")
start = time.perf_counter()
y = cm(np.array(10**6, "int64"), x)
seconds = time.perf_counter() - start
np.testing.assert_allclose(y, 2 * x, rtol=1e-5, atol=1e-6)  # the fixed point of s * 0.5 + x
assert seconds < 60, seconds
print("ok")
"""
    python(code, env={"EMBER_NUM_THREADS": "2"}, timeout=TIMEOUT).assert_ok()


def test_ctrl_c_stops_a_loop_of_a_quadrillion_iterations(tmp_path):
    code = LOOP + """
import sys, time
cm = ember.compile(loop_model())
x = np.random.default_rng().uniform(-2, 2, 4).astype("float32")
for attempt in range(3):  # the calls from the third on take the C path (ember.runtime.fastcall)
    print("looping", flush=True)
    try:
        cm(np.array(10**15, "int64"), x)
    except KeyboardInterrupt as e:
        print("interrupted:", e, flush=True)
    else:
        raise AssertionError("the loop ran to its end")
    sys.stdin.readline()  # the test is ready to interrupt again
np.testing.assert_allclose(cm(np.array(200, "int64"), x), 2 * x, rtol=1e-5, atol=1e-6)  # still works
print("ok")
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EMBER_CACHE_DIR": str(tmp_path / "cache")}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(TIMEOUT, child.kill)  # a loop that ignores SIGINT: the reads below end
    watchdog.start()
    try:
        for _ in range(3):  # through the Python path, then the C one
            line = child.stdout.readline()
            assert line.strip() == "looping", (line, child.stderr.read() if child.poll() is not None else "")
            time.sleep(0.5)  # well inside the loop
            child.send_signal(signal.SIGINT)
            line = child.stdout.readline()
            assert line.startswith("interrupted:"), f"SIGINT did not stop the loop: {line!r}"
            child.stdin.write("go\n")
            child.stdin.flush()
        out, err = child.communicate(timeout=TIMEOUT)
        assert child.returncode == 0 and out.strip().endswith("ok"), (child.returncode, out, err)
    finally:
        watchdog.cancel()
        child.kill()
        child.wait()
