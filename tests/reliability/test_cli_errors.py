"""The `ember` command reports an error as one line, `ember: error: ...` (a list such as the
unsupported operators after it), never a traceback, and exits non-zero: 1, or 130 when
interrupted; `--verbose`, before or after the subcommand, shows the traceback too. Each case runs
the command in a child process (`python -m ember.cli`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]


def ember_cli(python, *args: str, verbose: str | None = None):
    """Run `python -m ember.cli [--verbose] args` (verbose: "before" or "after" the subcommand)."""
    argv = list(args)
    if verbose == "before":
        argv.insert(0, "--verbose")
    elif verbose == "after":
        argv.insert(1, "--verbose")
    return python(args=("-m", "ember.cli", *argv))


def error_lines(run) -> list[str]:
    """stderr without the progress lines `ember compile` writes before it fails."""
    return [line for line in run.stderr.splitlines() if not line.startswith(("importing ", "compiling "))]


def assert_one_line(run, message: str) -> None:
    assert run.returncode == 1, run
    assert "Traceback" not in run.stderr, run
    lines = error_lines(run)
    assert len(lines) == 1 and lines[0].startswith("ember: error: "), run
    assert message in lines[0], run


def save(path: Path, nodes, inputs, outputs, initializers=()) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A model y = relu(x @ w) (x: 2 x 3) as ONNX and compiled, one with two unsupported
    operators, and a random file."""
    d = tmp_path_factory.mktemp("cli")
    w = np.random.default_rng().standard_normal((3, 4)).astype(np.float32)
    good = save(d / "good.onnx",
                [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [numpy_helper.from_array(w, "w")])
    bad = save(d / "bad.onnx", [helper.make_node("RandomNormalLike", ["x"], ["a"]),
                                helper.make_node("Multinomial", ["x"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2]),
                helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
               [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 1])])
    (d / "random.onnx").write_bytes(np.random.default_rng().bytes(500))
    art = d / "good.ember"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EMBER_CACHE_DIR": str(d / "cache")}
    subprocess.run([sys.executable, "-m", "ember.cli", "compile", str(good), "-o", str(art)], env=env, check=True,
                   capture_output=True, timeout=300)
    x = d / "x.npy"
    np.save(x, np.random.default_rng().standard_normal((2, 3)).astype(np.float32))
    return {"dir": d, "good": good, "bad": bad, "random": d / "random.onnx", "art": art, "x": x, "w": w}


def test_an_unsupported_operator_is_listed_without_a_traceback(python, files):
    run = ember_cli(python, "compile", str(files["bad"]), "-o", str(files["dir"] / "bad.ember"))
    assert run.returncode == 1 and "Traceback" not in run.stderr, run
    lines = error_lines(run)
    assert lines[0] == "ember: error: 2 unsupported operator(s): Multinomial, RandomNormalLike", run
    assert len(lines) == 3 and "RandomNormalLike" in lines[1] and "Multinomial" in lines[2], run


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_shows_the_traceback(python, files, where):
    run = ember_cli(python, "compile", str(files["bad"]), "-o", str(files["dir"] / "bad.ember"), verbose=where)
    assert run.returncode == 1 and "Traceback (most recent call last)" in run.stderr, run
    assert "UnsupportedOpError" in run.stderr
    assert run.stderr.splitlines()[-3] == "ember: error: 2 unsupported operator(s): Multinomial, RandomNormalLike", run


@pytest.mark.parametrize("command", ["compile", "info", "graph", "bisect", "tune"])
def test_a_file_that_is_not_onnx_is_one_line(python, files, command):
    args = [command, str(files["random"])]
    if command == "compile":
        args += ["-o", str(files["dir"] / "random.ember")]
    if command == "tune":
        args += ["--db", str(files["dir"] / "tune.db"), "--trials", "1"]
    assert_one_line(ember_cli(python, *args), f"{files['random']} is not a valid ONNX model")


def test_a_missing_onnx_file_is_one_line(python, files):
    missing = files["dir"] / "missing.onnx"
    assert_one_line(ember_cli(python, "compile", str(missing), "-o", "out.ember"), f"{missing}: no such file")


def test_a_folder_that_is_no_artifact_is_one_line(python, files, tmp_path):
    assert_one_line(ember_cli(python, "run", str(tmp_path), "--input", str(files["x"])), str(tmp_path))


def test_an_input_of_the_wrong_shape_is_one_line(python, files, tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng().standard_normal((3, 3)).astype(np.float32))
    run = ember_cli(python, "run", str(files["art"]), "--input", str(tmp_path / "x.npy"))
    assert_one_line(run, "input 'x' dimension 0: expected 2, got 3")


def test_an_input_file_that_is_no_npy_is_one_line(python, files):
    run = ember_cli(python, "run", str(files["art"]), "--input", str(files["random"]))
    assert_one_line(run, f"--input {files['random']} is not a NumPy .npy file")


def test_a_missing_input_file_is_one_line(python, files):
    missing = files["dir"] / "missing.npy"
    run = ember_cli(python, "run", str(files["art"]), "--input", str(missing))
    assert_one_line(run, f"{missing}: No such file or directory")


def test_an_output_that_cannot_be_written_is_one_line(python, files):
    out = files["dir"] / "no" / "such" / "folder" / "y.npy"
    run = ember_cli(python, "run", str(files["art"]), "--input", str(files["x"]), "--output", str(out))
    assert_one_line(run, f"{out}: No such file or directory")


def test_run_still_writes_the_right_answer(python, files, tmp_path):
    run = ember_cli(python, "run", str(files["art"]), "--input", str(files["x"]), "--output", str(tmp_path / "y.npy"))
    assert run.returncode == 0 and run.stderr == "", run
    x = np.load(files["x"])
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.maximum(x @ files["w"], 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("verbose", [False, True])
def test_ctrl_c_is_one_line_and_exit_130(files, verbose):
    """A real SIGINT while a subcommand runs (doctor, made to wait)."""
    code = textwrap.dedent(f"""
        import sys, time
        import ember.cli as cli

        def waits(args):
            print("ready", flush=True)
            time.sleep(60)

        cli.cmd_doctor = waits
        sys.exit(cli.main({['--verbose', 'doctor'] if verbose else ['doctor']!r}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
    try:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "ember: interrupted"
    assert ("Traceback" in stderr) == verbose, stderr
    if not verbose:
        assert stderr == "ember: interrupted\n"
