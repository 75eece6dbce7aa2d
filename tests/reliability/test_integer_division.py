"""Integer division and modulo never crash: by zero, and MIN // -1, in int32 and int64, in
scalar and vectorized C, in torch and ONNX models and single kernels. The results are NumPy's
(x // 0 == x % 0 == 0, MIN // -1 == MIN, MIN % -1 == 0), in every convention (floor and
truncating), and the loop-IR interpreter agrees with the C code exactly. Checked mode raises
ZeroDivisionError instead.

Every case that divides by zero runs in a child process, so that a SIGFPE is a failed test, not a
dead test run. Inputs are fresh random numbers; the child prints its seed when it fails.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te

DTYPES = ("int32", "int64")

# Inputs, and an oracle in Python integers (exact, then wrapped to the dtype), for the children.
COMMON = r"""
import sys, warnings
import numpy as np
warnings.simplefilter("ignore", RuntimeWarning)
dtype = sys.argv[1]
seed = np.random.SeedSequence().entropy
print("seed", seed, flush=True)
rng = np.random.default_rng(seed)
info = np.iinfo(dtype)


def operands(shape):
    n = int(np.prod(shape))
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    small = rng.integers(-4, 5, n, dtype=dtype)  # 0 and -1 among them
    large = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    b = np.where(rng.random(n) < 0.7, small, large).astype(dtype)
    picks = rng.permutation(n)
    a[picks[:3]] = [info.min, info.max, info.min]
    b[picks[:3]] = [-1, 0, 0]  # MIN // -1, MAX // 0, MIN // 0, and more wherever they fall
    a[picks[3]], b[picks[3]] = info.min, rng.choice([2, -2, 3, -3])
    return a.reshape(shape), b.reshape(shape)


def wrap(x):
    return (x - info.min) % (1 << info.bits) + info.min


def trunc(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


ORACLE = {  # on Python ints; every convention gives 0 for a zero divisor
    "floordiv": lambda a, b: wrap(a // b) if b else 0,
    "floormod": lambda a, b: a % b if b else 0,
    "truncdiv": lambda a, b: wrap(trunc(a, b)) if b else 0,
    "truncmod": lambda a, b: a - b * trunc(a, b) if b else 0,
}


def expect(kind, a, b):
    f = ORACLE[kind]
    return np.array([f(int(x), int(y)) for x, y in zip(a.ravel(), b.ravel())], dtype=dtype).reshape(a.shape)


def check(name, got, want, a, b):
    bad = np.flatnonzero(got.ravel() != want.ravel())
    assert bad.size == 0, (name, [(a.ravel()[k], b.ravel()[k], got.ravel()[k], want.ravel()[k]) for k in bad[:5]])
"""

KERNELS = COMMON + r"""
import ember
from ember import te
from ember.runtime.module import build_c_module, build_python

OPS = {"floordiv": te.floordiv, "floormod": te.floormod, "truncdiv": te.truncdiv, "truncmod": te.truncmod}
LAYOUTS = {  # shape, schedule
    "scalar": ((37,), None),  # a serial loop
    "guarded": ((37,), "split8"),  # a vectorized loop whose last iterations are guarded off
    "vector": ((5, 16), "inner"),  # vectors of 16 lanes
    "padded": ((13, 3), "inner"),  # vectors of 3 lanes in types of 4 (a garbage lane)
}
funcs, data = [], {}
for layout, (shape, how) in LAYOUTS.items():
    for kind, op in OPS.items():
        for divisor in ("b", 0, -1):  # the input; constants (folded into the code)
            A, B = te.placeholder(shape, dtype, "A"), te.placeholder(shape, dtype, "B")
            rhs = (lambda i: B[i]) if divisor == "b" else (lambda i, c=divisor: B[i] * 0 + c)
            C = te.compute(shape, lambda *i: op(A[i], rhs(i)), name="C")
            s = te.create_schedule(C.op)
            if how == "split8":
                s[C].vectorize(s[C].split(C.op.axis[0], factor=8)[1])
            elif how == "inner":
                s[C].vectorize(C.op.axis[-1])
            funcs.append(ember.lower(s, [A, B, C], name=f"{kind}_{layout}_{divisor}".replace("-", "m")))
            a, b = operands(shape)
            data[funcs[-1].name] = a, b if divisor == "b" else np.full_like(b, divisor)
kernels = build_c_module(funcs, checked=False)
assert f"ember_floordiv_{dtype}x" in kernels["floordiv_vector_b"].source  # the vector helpers ran
for f in funcs:
    a, b = data[f.name]
    want = expect(f.name.split("_")[0], a, b)
    for target, kernel in (("c", kernels[f.name]), ("python", build_python(f))):
        got = np.full_like(a, 7)
        kernel(a, b, got)
        check(f"{f.name} ({target})", got, want, a, b)
print("ok")
"""

MODELS = COMMON + r"""
import onnx
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
import ember


class Divide(torch.nn.Module):
    def forward(self, a, b):
        return a // b, torch.remainder(a, b), torch.div(a, b, rounding_mode="trunc")


for dtype in sys.argv[1:]:  # one child for both: importing torch is most of its time
    info = np.iinfo(dtype)
    for shape in [(2, 4, 16), (3, 37)]:  # vectorized; scalar
        a, b = operands(shape)
        ex = (torch.ones(shape, dtype=getattr(torch, dtype)), torch.ones(shape, dtype=getattr(torch, dtype)))
        cm = ember.compile(Divide(), ex)
        for kind, got in zip(("floordiv", "floormod", "truncdiv"), cm(torch.from_numpy(a), torch.from_numpy(b))):
            check(f"torch {kind} {shape}", got.numpy(), expect(kind, a, b), a, b)

    elem = {"int32": TensorProto.INT32, "int64": TensorProto.INT64}[dtype]
    shape = [3, 32]
    nodes = [helper.make_node("Div", ["a", "b"], ["div"]), helper.make_node("Mod", ["a", "b"], ["mod"]),
             helper.make_node("Mod", ["a", "b"], ["fmod"], fmod=1)]
    graph = helper.make_graph(nodes, "divide", [helper.make_tensor_value_info(x, elem, shape) for x in "ab"],
                              [helper.make_tensor_value_info(x, elem, shape) for x in ("div", "mod", "fmod")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    a, b = operands(tuple(shape))
    got = ember.compile(model)(a, b)
    want = ReferenceEvaluator(model).run(None, {"a": a, "b": b})
    for kind, g, w in zip(("truncdiv", "floormod", "truncmod"), got, want):
        w = np.where(b == 0, 0, w).astype(dtype)  # onnx leaves x / 0 to the runtime: ember's is 0
        check(f"onnx {kind}", g, w, a, b)
        check(f"onnx {kind} (oracle)", g, expect(kind, a, b), a, b)
print("ok")
"""

CHECKED = COMMON + r"""
import threading
import torch
import ember
from ember import te


class Divide(torch.nn.Module):
    def forward(self, a, b):
        return (a + 1) // b, torch.remainder(a, b)


shape = (4, 16)
ex = (torch.ones(shape, dtype=getattr(torch, dtype)), torch.ones(shape, dtype=getattr(torch, dtype)))
cm = ember.compile(Divide(), ex, checked=True, name="divider")
a, b = operands(shape)
nonzero = np.where(b == 0, 5, b).astype(dtype)
got = cm(a, nonzero)  # MIN // -1 is no error: it wraps, as in numpy
check("checked floordiv", got[0], expect("floordiv", a + np.asarray(1, dtype), nonzero), a, nonzero)
check("checked floormod", got[1], expect("floormod", a, nonzero), a, nonzero)
try:
    cm(a, b)
    raise AssertionError("no ZeroDivisionError")
except ZeroDivisionError as e:
    assert "model 'divider'" in str(e) and "floor_divide" in str(e), str(e)
try:
    cm.profile(a, b, repeat=1)
    raise AssertionError("no ZeroDivisionError from profile")
except ZeroDivisionError:
    pass

errors, wrong = [], []


def run(divisor, expect_error):
    for _ in range(200):
        try:
            out = cm(a, divisor)
            if expect_error:
                wrong.append("no error")
            elif not (out[1] == expect("floormod", a, divisor)).all():
                wrong.append("wrong result")
        except ZeroDivisionError:
            (errors if expect_error else wrong).append("error")


threads = [threading.Thread(target=run, args=(b, True)), threading.Thread(target=run, args=(nonzero, False))]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not wrong and len(errors) == 200, (wrong[:5], len(errors))

A, B = te.placeholder((37,), dtype, "A"), te.placeholder((37,), dtype, "B")
C = te.compute((37,), lambda i: A[i] % B[i], name="C")
s = te.create_schedule(C.op)
s[C].vectorize(s[C].split(C.op.axis[0], factor=8)[1])
f = ember.build(s, [A, B, C], name="remainder", checked=True)
a, b = operands((37,))
c = np.empty_like(a)
f(a, np.where(b == 0, 3, b).astype(dtype), c)
check("checked kernel", c, expect("floormod", a, np.where(b == 0, 3, b)), a, b)
try:
    f(a, b, c)
    raise AssertionError("no ZeroDivisionError")
except ZeroDivisionError as e:
    assert "kernel remainder" in str(e), str(e)
print("ok")
"""


def _ok(python, code: str, *dtypes: str) -> None:
    python(code, args=dtypes, timeout=240).assert_ok()


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels_divide_by_zero_like_numpy(python, dtype):
    """te kernels, every convention and layout: C and the interpreter give the oracle's results."""
    _ok(python, KERNELS, dtype)


def test_torch_and_onnx_models_divide_by_zero_like_numpy(python):
    """torch's //, remainder and trunc division; ONNX Div and Mod (both fmod) against onnx's
    reference evaluator; int32 and int64, vectorized and scalar kernels."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    _ok(python, MODELS, *DTYPES)


def test_checked_mode_raises_zero_division_error(python):
    """int64 here (int32 takes the same code): a checked model and kernel raise, name what divided,
    give the unchecked results otherwise, and keep concurrent calls apart."""
    pytest.importorskip("torch")
    _ok(python, CHECKED, "int64")


def _floordiv_kernel(checked: bool):
    A, B = te.placeholder((4, 16), "int32", "A"), te.placeholder((4, 16), "int32", "B")
    C = te.compute((4, 16), lambda i, j: A[i, j] // B[i, j], name="C")
    s = te.create_schedule(C.op)
    s[C].vectorize(C.op.axis[1])
    return ember.build(s, [A, B, C], checked=checked)


def test_checked_mode_is_another_build():
    """checked changes the source, hence the cache key; unchecked, the vector helper is branch-free."""
    plain, checked = _floordiv_kernel(False), _floordiv_kernel(True)
    assert plain.path != checked.path
    helper = plain.source.split("ember_floordiv_int32x16(int32x16 a, int32x16 b) {")[1].split("\n}")[0]
    assert "if" not in helper and "for" not in helper and "?" not in helper, helper
    assert "int64_t* ember_status" in checked.source and "ember_status" not in plain.source


def test_checked_option_from_the_environment(monkeypatch):
    monkeypatch.setenv("EMBER_CHECKED", "1")
    f = _floordiv_kernel(None)
    a = np.random.default_rng().integers(-100, 100, (4, 16), dtype=np.int32)
    b = np.random.default_rng().integers(1, 9, (4, 16), dtype=np.int32)
    c = np.empty_like(a)
    f(a, b, c)
    np.testing.assert_array_equal(c, a // b)
    assert f.checked
