"""The `ember` command: compile, run, info and doctor on a small ONNX model."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ember.cli import main


@pytest.fixture
def onnx_model(save_onnx):
    w = np.random.rand(8, 4).astype("float32")
    return save_onnx([2, 8], [2, 4], {"w": w}), w


def test_info_lists_operators(onnx_model, capsys):
    path, _ = onnx_model
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "relu" in out and "1 inputs" in out


def test_info_lists_every_unsupported_operator(tmp_path, capsys):
    graph = helper.make_graph(
        [helper.make_node("RandomNormalLike", ["x"], ["a"]),
         helper.make_node("Multinomial", ["x"], ["v"])],
        "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("v", TensorProto.INT32, [2, 1])],
    )
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert main(["info", str(path)]) == 1
    out = capsys.readouterr().out
    assert "RandomNormalLike" in out and "Multinomial" in out


def test_compile_then_run(onnx_model, tmp_path):
    path, w = onnx_model
    art = tmp_path / "model.ember"
    assert main(["compile", str(path), "-o", str(art)]) == 0
    x = np.random.rand(2, 8).astype("float32")
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(art), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
    assert main(["info", str(art)]) == 0


def test_doctor(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "C compiler" in out and "OpenMP" in out and "SIMD" in out and "float32 lanes" in out
    assert "[ok] machine: " in out and " cores, caches L1d " in out
    assert "[ok] call path: calls are checked and made in C" in out
    # the CUDA target's pieces: each there, or why not (no GPU is no failure of the doctor)
    assert "NVRTC: NVRTC 1" in out or "NVRTC: NVRTC is not installed" in out
    assert "GPU:" in out and ("compute capability" in out or "no CUDA driver" in out or "no GPU" in out)


def test_doctor_fails_when_the_flags_target_what_this_machine_lacks(capsys, monkeypatch):
    from ember import target

    monkeypatch.setattr(target, "machine_features", lambda: frozenset())
    if not target.Target().features:
        pytest.skip("the compiler's flags enable no extension")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "[--] SIMD: " in out and "this machine lacks" in out


def test_doctor_says_when_calls_take_the_python_path(capsys, monkeypatch):
    monkeypatch.setenv("EMBER_FAST_CALL", "0")
    assert main(["doctor"]) == 0  # the Python path works: not a failure
    assert "[--] call path: EMBER_FAST_CALL=0: calls take the Python path" in capsys.readouterr().out


def test_doctor_compares_the_gpus_facts_with_its_architectures_row():
    from ember.cli import _table_row
    from ember.target import GPU

    assert _table_row(GPU.of("sm_80")) == (True, "the device's agree with ember.target.ARCHS' row for sm_80")
    assert _table_row(GPU.of("sm_80", multiprocessors=8)) == (
        True, "the device's agree with ember.target.ARCHS' row for sm_80 but for multiprocessors 8 (the table's 108)")
    assert _table_row(GPU.of("sm_89", shared_opt_in=100 * 1024)) == (
        False, "the device's differ from ember.target.ARCHS' row for sm_89: shared_opt_in 102400 (the table's 101376)")
    works, said = _table_row(GPU(arch="sm_100"))
    assert works and said.startswith("the device's are used; without it: no facts of GPU architecture 'sm_100'")


def test_info_on_an_artifact_shows_kernels_times_and_memory(onnx_model, tmp_path, capsys):
    path, _ = onnx_model
    art = tmp_path / "model.ember"
    assert main(["compile", str(path), "-o", str(art)]) == 0
    capsys.readouterr()
    assert main(["info", str(art), "--profile", "2"]) == 0
    out = capsys.readouterr().out
    assert "kernels" in out and "median of 2 profiled runs" in out and "gemm + relu" in out
    assert "memory: workspace" in out and "unplanned" in out


def test_bisect(onnx_model, tmp_path, capsys):
    path, _ = onnx_model
    x = tmp_path / "x.npy"
    np.save(x, np.random.rand(2, 8).astype("float32"))
    assert main(["bisect", str(path), "--input", str(x), "--rtol", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert "rtol=1e-05" in out and "[ok] + dce" in out
    assert "verdict: no pass changes the output beyond tolerance" in out


def test_bisect_kernels(onnx_model, tmp_path, capsys):
    path, _ = onnx_model
    x = tmp_path / "x.npy"
    np.save(x, np.random.rand(2, 8).astype("float32"))
    assert main(["bisect", str(path), "--input", str(x), "--kernels", "--out", str(tmp_path / "repro")]) == 0
    out = capsys.readouterr().out
    assert "each kernel in C against the loop-IR interpreter" in out and "[ok] #0" in out
    assert "verdict: every kernel's C agrees with its loop IR" in out and not (tmp_path / "repro").exists()
