"""Tuning and compiling from every way a program is launched: a script without a main guard,
`python -c`, stdin, `-m`, a daemonic multiprocessing worker, a thread. Worker processes are
ember's own (ember.workers) and never run the caller's main module again, so the module body
runs once and every trial can succeed. A run in which every trial fails raises TuneError."""

from __future__ import annotations

import math
import re
import textwrap
import time
from pathlib import Path

import pytest

MARKER = "MODULE BODY RAN"

# a small GEMM, tuned with a handful of trials by the default runner (one worker per core)
GEMM = """
import ember.tune
import ember.tune.search
from ember import te

ember.tune.search.POPULATION = 8  # a small search: what these tests check is how tuning is launched

A = te.placeholder((32, 32), name="A")
B = te.placeholder((32, 32), name="B")
k = te.reduce_axis((0, 32), name="k")
C = te.compute((32, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
"""
TUNE = f"""
print({MARKER!r}, flush=True)
{GEMM}
result = ember.tune.tune([A, B, C], trials=4, batch=4)
print("LATENCY", repr(result.latency_s), flush=True)
"""

# a chain of matmuls of distinct shapes: 8 distinct kernels, lowered in 2 processes
COMPILE = """
import numpy as np
from ember.compiler import compile_graph
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op

rng = np.random.default_rng()

def chain():
    g = Graph("chain")
    h = g.add_input("x", TensorType((4, 16)))
    ws = [(rng.standard_normal((16 + k, 17 + k)) / np.sqrt(16 + k)).astype(np.float32) for k in range(8)]
    for k, w in enumerate(ws):
        h = add_op(g, "matmul", [h, g.add_constant(w, f"w{k}")])[0]
    g.set_outputs([h])
    return g, ws

def compile_chain(database=None):
    g, ws = chain()
    cm = compile_graph(g, jobs=2, database=database)
    data = rng.standard_normal((4, 16)).astype(np.float32)
    expected = data.astype(np.float64)
    for w in ws:
        expected = expected @ w
    np.testing.assert_allclose(cm(data), expected, rtol=1e-4, atol=1e-4)
    return cm.stats.jobs, cm.stats.kernels
"""


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One build cache for the launches below: they tune the same candidates (each compile lowers
    its kernels again, in its worker processes: none are read from the disk)."""
    return {"EMBER_CACHE_DIR": str(tmp_path_factory.mktemp("launch-cache")), "EMBER_LOWERED_CACHE": "0"}


def tuned_once(run) -> None:
    assert run.returncode == 0, run
    assert run.stdout.count(MARKER) == 1, run
    latency = float(re.search(r"LATENCY (\S+)", run.stdout).group(1))
    assert math.isfinite(latency) and latency > 0, run


def test_tune_from_a_script_without_a_main_guard(tmp_path, python, shared_cache):
    script = tmp_path / "script.py"
    script.write_text(TUNE)
    tuned_once(python(args=(str(script),), env=shared_cache, timeout=180))


def test_tune_from_stdin(python, shared_cache):
    tuned_once(python(args=("-",), stdin=TUNE, env=shared_cache, timeout=180))


def test_tune_from_dash_c(python, shared_cache):
    tuned_once(python(TUNE, env=shared_cache, timeout=180))


def test_tune_from_dash_m(tmp_path, python, shared_cache):
    (tmp_path / "tunemod.py").write_text(TUNE)
    tuned_once(python(args=("-m", "tunemod"), env={**shared_cache, "PYTHONPATH": str(tmp_path)},
                          cwd=tmp_path, timeout=180))


def test_tune_and_compile_in_a_daemonic_pool_worker(python, shared_cache):
    code = GEMM + COMPILE + textwrap.dedent("""
        import multiprocessing

        def job(_):
            assert multiprocessing.current_process().daemon
            latency = ember.tune.tune([A, B, C], trials=4, batch=4).latency_s
            return latency, compile_chain()

        with multiprocessing.get_context("fork").Pool(1) as pool:
            print("POOL", pool.map(job, [0]), flush=True)
        """)
    run = python(code, env=shared_cache, timeout=240)
    assert run.returncode == 0, run
    [(latency, (jobs, kernels))] = eval(re.search(r"POOL (.*)", run.stdout).group(1))
    assert math.isfinite(latency) and jobs == 2 and kernels == 8, run


def test_tune_and_compile_in_a_thread(python, shared_cache):
    code = GEMM + COMPILE + textwrap.dedent("""
        import threading

        out = []
        def job():
            out.append((ember.tune.tune([A, B, C], trials=4, batch=4).latency_s, compile_chain()))

        t = threading.Thread(target=job)
        t.start()
        t.join()
        print("THREAD", out, flush=True)
        """)
    run = python(code, env=shared_cache, timeout=240)
    assert run.returncode == 0, run
    [(latency, (jobs, kernels))] = eval(re.search(r"THREAD (.*)", run.stdout).group(1))
    assert math.isfinite(latency) and jobs == 2 and kernels == 8, run


def test_a_tuning_run_whose_every_trial_fails_raises_tune_error(python):
    code = GEMM + COMPILE + textwrap.dedent("""
        from ember.errors import TuneError
        from ember.tune import Database, tune_model

        for what, run in (("TUNE", lambda: ember.tune.tune([A, B, C], trials=4, batch=4)),
                          ("MODEL", lambda: tune_model(chain()[0], database=Database(":memory:"), trials=4, batch=2,
                                                       max_tasks=2, progress=False))):
            try:
                print(what, "RETURNED", run().latency_s)
            except TuneError as e:
                print(what, "RAISED", e)
        """)
    run = python(code, env={"EMBER_CC": "false"}, timeout=180)
    assert run.returncode == 0, run
    tune = re.search(r"TUNE RAISED (.*)", run.stdout)
    assert tune, run
    assert "all 4 measurements failed: 4 x build failed: BuildError: cannot run the C compiler 'false'" \
        in tune.group(1), run
    model = re.search(r"MODEL RAISED (.*)", run.stdout)
    assert model and "every one of its 2 task(s) failed" in model.group(1) and "BuildError" in model.group(1), run


def test_a_task_whose_every_trial_fails_keeps_its_own_schedule(python, shared_cache):
    code = GEMM + COMPILE + textwrap.dedent("""
        from ember.tune import Database, LocalRunner, MeasureResult, tune_model
        from ember.tune.extract import extract_tasks

        g, _ = chain()
        bad = extract_tasks(g)[0].key

        class FailOne:  # every measurement of one task fails
            def __init__(self):
                self.runner = LocalRunner(workers=1, repeats=2, min_repeat_s=0.001)

            def measure(self, inputs, repeats=None, cutoff_s=None):
                good = iter(self.runner.measure([i for i in inputs if i.task.key != bad], repeats, cutoff_s))
                return [MeasureResult((), "planted failure") if i.task.key == bad else next(good) for i in inputs]

        runner, db = FailOne(), Database(":memory:")
        report = tune_model(g, database=db, trials=4, batch=2, max_tasks=2, runner=runner, progress=False)
        runner.runner.close()
        print("FAILED", [r.task.key == bad for r in report.failed], report.failed[0].error)
        print("ESTIMATE", report.estimated_latency_s)
        print("REPORT", str(report).replace("\\n", " | "))
        print("COMPILED", compile_chain(database=db))  # checked against NumPy
        """)
    run = python(code, env=shared_cache, timeout=180)
    assert run.returncode == 0, run
    assert re.search(r"FAILED \[True\] tuning \S+: all \d+ measurements failed: \d+ x planted failure", run.stdout), run
    assert 0 < float(re.search(r"ESTIMATE (\S+)", run.stdout).group(1)) < math.inf, run
    assert "failed, keeps its own schedule" in run.stdout and "(1 failed task(s) left out)" in run.stdout, run
    assert "COMPILED (2, 8)" in run.stdout, run


def test_the_cli_says_in_one_line_that_every_trial_failed(python, tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from ember.testing import random_array

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(random_array((16, 8)), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "model.onnx")
    run = python(GEMM + "import sys\nfrom ember.cli import main\nsys.exit(main(sys.argv[1:]))",
                 args=("tune", "model.onnx", "--trials", "2", "--db", "tuning.db"), cwd=tmp_path,
                 env={"EMBER_CC": "false"}, timeout=180)
    assert run.returncode == 1, run
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ember: error: tuning the model: every one of its 1 task(s) failed: tuning "), run
    assert "BuildError: cannot run the C compiler 'false'" in last and "Traceback" not in run.stderr, run
    assert "inf" not in run.stderr.replace("install", ""), run


def test_torch_models_lower_in_parallel(python):
    pytest.importorskip("torch")
    run = python(COMPILE + textwrap.dedent("""
        import os
        import torch
        import ember

        torch.manual_seed(0)
        layers = [m for k in range(8) for m in (torch.nn.Linear(16 + k, 17 + k), torch.nn.ReLU())]
        model = torch.nn.Sequential(*layers).eval()
        x = torch.randn(4, 16)
        cm = ember.compile(model, example_inputs=(x,), jobs=os.cpu_count())
        np.testing.assert_allclose(cm(x.numpy()), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)
        print("STATS", cm.stats.jobs, cm.stats.lowered, os.cpu_count())
        """), timeout=180)
    assert run.returncode == 0, run
    jobs, lowered, cores = map(int, re.search(r"STATS (\d+) (\d+) (\d+)", run.stdout).groups())
    assert lowered >= 8 and jobs == min(cores, lowered), run
    if cores > 1:
        assert jobs > 1, run


def test_the_worker_pool_replaces_dead_and_hung_workers_and_leaves_no_process(python, tmp_path):
    (tmp_path / "userkernels.py").write_text("def triple(x):\n    return 3 * x\n")
    run = python("""
        import os, pathlib, sys
        from ember.workers import Call, WorkerPool

        def children():
            return [p.name for p in pathlib.Path("/proc").iterdir() if p.name.isdigit() and
                    (p / "stat").exists() and (p / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(os.getpid())]

        with WorkerPool(2) as pool:
            for o in pool.run([Call("os:abort"), Call("time:sleep", (60,), limit_s=0.5), Call("math:sqrt", (-1.0,)),
                               Call("math:sqrt", (4.0,))]):
                print("OUTCOME", o.status, type(o.value).__name__, o.value)
            try:
                pool.map("math:sqrt", [(-1.0,)])
            except ValueError as e:
                print("RAISED", type(e).__name__, "ember worker process" in "".join(e.__notes__))
            print("AGAIN", pool.map("math:sqrt", [(9.0,), (16.0,)]), len(children()))
        print("LEFT", children())

        # a worker sees the parent's environment and sys.path as they are when it starts
        sys.path.insert(0, sys.argv[1])
        os.environ["EMBER_LAUNCH_TEST"] = "set at run time"
        with WorkerPool(1) as pool:
            print("USER", pool.map("userkernels:triple", [(2,)]), pool.map("os:getenv", [("EMBER_LAUNCH_TEST",)]))
        """, args=(str(tmp_path),), timeout=60)
    assert run.returncode == 0, run
    outcomes = re.findall(r"OUTCOME (.*)", run.stdout)
    assert outcomes == ["lost str crashed: signal 6 (SIGABRT)", "lost str timed out after 0.5 s",
                        "error ValueError math domain error", "ok float 2.0"], run
    assert "RAISED ValueError True" in run.stdout and "AGAIN [3.0, 4.0] 2" in run.stdout, run
    assert "LEFT []" in run.stdout, run
    assert "USER [6] ['set at run time']" in run.stdout, run


def test_workers_exit_when_their_parent_is_killed(python):
    run = python("""
        import os, signal
        from ember.workers import WorkerPool

        pool = WorkerPool(2)
        pool.map("os:getpid", [(), ()])
        print("WORKERS", *[w.popen.pid for w in pool._workers], flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """, timeout=60)
    assert run.signal == "SIGKILL", run
    pids = [int(p) for p in re.search(r"WORKERS (.*)", run.stdout).group(1).split()]
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), pids


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie whose parent is gone is reaped by init soon after)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
