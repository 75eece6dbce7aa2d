"""Ctrl-C (SIGINT) stops ember and leaves nothing running: a compile interrupted in the process
itself, or in a worker process of a pool the interrupted parent closes, kills the C compiler with
every process it started. The compiler is a stand-in (EMBER_CC) that starts a long-running child
as gcc starts cc1, as and ld, and records both process ids; the user's program runs in a child
process that the test interrupts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TIMEOUT = 120
ROOT = Path(__file__).resolve().parents[2]

# answers --version and a preprocessor query (-E) at once; a build (-o) records its pid and
# starts a "cc1" that runs for minutes
FAKE_CC = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "fake cc 1.0"; exit 0; fi
case " $* " in *" -o "*) ;; *) exit 0 ;; esac
echo $$ > "$EMBER_TEST_PIDS/driver"
sleep 600 &
echo $! > "$EMBER_TEST_PIDS/cc1"
wait
"""

COMPILE = """
import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
g = Graph("g")
x = g.add_input("x", TensorType((8,)))
g.set_outputs(add_op(g, "relu", [x]))
print("compiling", flush=True)
ember.compile(g)
"""

IN_A_WORKER = """
from ember.workers import WorkerPool
print("compiling", flush=True)
with WorkerPool(1, preload=["ember.runtime.build"]) as pool:
    pool.map("ember.runtime.build:build_library", [("int x;",)])
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
@pytest.mark.parametrize("code", [COMPILE, IN_A_WORKER], ids=["in the process", "in a worker"])
def test_ctrl_c_during_a_compile_leaves_no_compiler_running(tmp_path, code):
    cc = tmp_path / "fake-cc"
    cc.write_text(FAKE_CC)
    cc.chmod(0o755)
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "EMBER_CC": str(cc), "EMBER_TEST_PIDS": str(pids), "EMBER_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    started = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while not all((pids / name).is_file() and (pids / name).read_text().strip() for name in ("driver", "cc1")):
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.05)
        started = [int((pids / name).read_text()) for name in ("driver", "cc1")]
        child.send_signal(signal.SIGINT)  # what a Ctrl-C sends the program
        out, err = child.communicate(timeout=TIMEOUT)
        assert child.returncode != 0 and "KeyboardInterrupt" in err, (child.returncode, out, err)
        deadline = time.monotonic() + 10
        while any(map(_alive, started)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in started if _alive(pid)], f"compiler processes still running: {started}\n{err}"
    finally:
        child.kill()
        for pid in started:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
