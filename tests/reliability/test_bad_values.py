"""Values a model cannot be computed with, at import or at call time, give an EmberError that names
the node and the value, never an internal Python error (OverflowError, ZeroDivisionError, NumPy's
MemoryError) or a wrong answer: an ArgMax over an axis that a call binds to 0 (it returned
INT64_MAX; ONNX Runtime raises), Resize with a NaN or infinite scale, ConstantOfShape with a
negative dimension, Range with delta 0, OneHot with a depth of 1e12, and `ember run` with an .npy
whose header claims more data than the file holds (a NumPy traceback). torch's `int32 + 2**31`
wraps, as torch computes it. Each runs in a child process: a crash or a hang is a failed test."""

from __future__ import annotations

import textwrap

import pytest

ONNX = """
import numpy as np, ember
from onnx import TensorProto as T, helper as h
from ember.errors import EmberError
vi = h.make_tensor_value_info


def model(node, inputs, outputs, inits=()):
    return h.make_model(h.make_graph([node], "g", inputs, outputs, initializer=list(inits)),
                        opset_imports=[h.make_opsetid("", 18)])


def refused(build, *args, says):
    try:
        out = ember.compile(build())(*args)
    except EmberError as e:
        assert all(s in str(e) for s in says), str(e)
        print(type(e).__name__, e)
        return
    raise AssertionError(f"no error; got {out}")
"""

CASES = {
    "argmax of an empty axis": """
        m = lambda: model(h.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0), [vi("x", T.FLOAT, [2, "n"])],
                          [vi("y", T.INT64, [2])])
        refused(m, np.zeros((2, 0), "float32"), says=["'n'", "is 0", "ArgMax"])
        assert (ember.compile(m())(np.array([[1, 3, 2], [5, 4, 5]], "float32")) == [1, 0]).all()
    """,
    "resize by nan and inf": """
        for scale in (np.inf, np.nan, -2.0):
            m = lambda: model(h.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest"),
                              [vi("x", T.FLOAT, [1, 1, 2, 2])], [vi("y", T.FLOAT, ["a", "b", "c", "d"])],
                              [h.make_tensor("s", T.FLOAT, [4], [1, 1, scale, 2])])
            refused(m, np.ones((1, 1, 2, 2), "float32"), says=["Resize node", str(scale)])
    """,
    "constant of a negative shape": """
        m = lambda: model(h.make_node("ConstantOfShape", ["s"], ["y"]), [vi("s", T.INT64, [2])],
                          [vi("y", T.FLOAT, ["a", "b"])])
        refused(m, np.array([2, -3]), says=["ConstantOfShape node", "[2, -3]"])
    """,
    "range of delta 0": """
        m = lambda: model(h.make_node("Range", ["a", "b", "d"], ["y"]),
                          [vi(n, T.INT64, []) for n in "abd"], [vi("y", T.INT64, ["n"])])
        refused(m, np.array(0), np.array(5), np.array(0), says=["Range node", "delta 0"])
        m2 = lambda: model(h.make_node("Range", ["a", "b", "d"], ["y"]),
                           [vi(n, T.FLOAT, []) for n in "abd"], [vi("y", T.FLOAT, ["n"])])
        refused(m2, *(np.array(v, "float32") for v in (0, np.inf, 1)), says=["Range node", "limit inf"])
    """,
    "one-hot of depth 1e12": """
        m = lambda: model(h.make_node("OneHot", ["i", "d", "v"], ["y"]), [vi("i", T.INT64, [3]), vi("d", T.INT64, [])],
                          [vi("y", T.FLOAT, [3, "a"])], [h.make_tensor("v", T.FLOAT, [2], [0, 1])])
        refused(m, np.array([1, 2, 3]), np.array(10**12), says=["OneHot node", "1000000000000"])
        refused(m, np.array([1, 2, 3]), np.array(0), says=["OneHot node", "depth is 0"])
    """,
}


@pytest.mark.parametrize("case", list(CASES))
def test_onnx_bad_values_raise_ember_errors(python, case):
    python(ONNX + textwrap.dedent(CASES[case]) + "\nprint('ok')\n", timeout=300).assert_ok()


def test_torch_int32_plus_a_large_python_int_wraps_as_torch(python):
    python("""
        import torch, ember

        class Add(torch.nn.Module):
            def forward(self, x):
                return x + 2**31, x * (2**32 + 3)

        x = torch.arange(-3, 5, dtype=torch.int32)
        for target in ("c", "python"):
            got = ember.compile(Add(), (x,), target=target)(x)
            for g, w in zip(got, Add()(x)):
                assert torch.equal(g, w), (g, w)
        print("ok")
    """, timeout=300).assert_ok()


def test_ember_run_with_an_npy_header_claiming_a_huge_shape(python, tmp_path):
    python(f"""
        import numpy as np, onnx, subprocess, sys
        from onnx import TensorProto as T, helper as h
        d = {str(tmp_path)!r}
        x, y = (h.make_tensor_value_info(n, T.FLOAT, [3]) for n in "xy")
        m = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                         opset_imports=[h.make_opsetid("", 13)])
        onnx.save(m, d + "/relu.onnx")
        np.save(d + "/x.npy", np.ones(3, "float32"))
        data = open(d + "/x.npy", "rb").read()
        open(d + "/huge.npy", "wb").write(data.replace(b"(3,)", b"(10000000000000,)"))
        cli = [sys.executable, "-m", "ember.cli"]
        subprocess.run([*cli, "compile", d + "/relu.onnx", "-o", d + "/relu.ember"], check=True, capture_output=True)
        run = subprocess.run([*cli, "run", d + "/relu.ember", "--input", d + "/huge.npy"],
                             capture_output=True, text=True)
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        assert "huge.npy" in run.stderr and "10000000000000" in run.stderr, run.stderr
        ok = subprocess.run([*cli, "run", d + "/relu.ember", "--input", d + "/x.npy"], capture_output=True, text=True)
        assert ok.returncode == 0, ok.stderr
        print("ok")
    """, timeout=300).assert_ok()
