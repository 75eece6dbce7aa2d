"""Random kernels of the tile language: hypothesis draws an elementwise expression over two
blocks (float32, float16, int32 or int8), optionally reduced along an axis or stored under a
data-dependent mask, writes it as a @triton.jit kernel into a .py file (@jit needs the source)
and checks the interpreter against the same expression in NumPy; and, where
ember.triton.compiler exists, the compiled kernel against the interpreted one.

Every operator node has at least one block operand (a constant-only subexpression would be typed
by Triton's rules, not NumPy's), and the references write constants as Python numbers, which
NumPy, as Triton, lets take the block's type."""

import hashlib
import importlib.util
import itertools
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tile_modes import HAS_COMPILER, launch_mode

import ember.triton as triton


def c_div(a, b):
    """C's integer division (toward zero), in the type the kernel computes it in."""
    dtype = np.result_type(a, b)
    a, b = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
    return (np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)).astype(dtype)


def c_mod(a, b):
    dtype = np.result_type(a, b)
    return (np.asarray(a).astype(np.int64) - c_div(a, b).astype(np.int64) * np.asarray(b)).astype(dtype)


def _render(template: tuple[str, str], *args) -> tuple[str, str]:
    return template[0].format(*(a[0] for a in args)), template[1].format(*(a[1] for a in args))


def _typed(e: tuple[str, str]) -> bool:
    return re.search(r"\b[xy]\b", e[0]) is not None


FLOAT = {
    "leaves": st.sampled_from([("x", "x"), ("y", "y")]) | st.sampled_from([-2.0, -0.5, 0.25, 1.5, 3.0]).map(
        lambda c: (repr(c), repr(c))),
    "unary": [("(-{})", "(-{})"), ("tl.abs({})", "np.abs({})"), ("tl.exp(-tl.abs({}))", "np.exp(-np.abs({}))"),
              ("tl.sigmoid({})", "(1 / (1 + np.exp(-{})))"), ("tl.tanh({})", "np.tanh({})"),
              ("tl.sqrt(tl.abs({}) + 1.0)", "np.sqrt(np.abs({}) + 1.0)"),
              ("tl.exp2(tl.minimum({}, 6.0))", "np.exp2(np.minimum({}, 6.0))"), ("({}).cos()", "np.cos({})"),
              ("tl.math.log2(tl.abs({}) + 1.0)", "np.log2(np.abs({}) + 1.0)"),
              ("tl.rsqrt(tl.abs({}) + 0.5)", "(1 / np.sqrt(np.abs({}) + 0.5))")],
    "binary": [("({} + {})", "({} + {})"), ("({} - {})", "({} - {})"), ("({} * {})", "({} * {})"),
               ("({} / (tl.abs({}) + 1.0))", "({} / (np.abs({}) + 1.0))"),
               ("tl.maximum({}, {})", "np.fmax({}, {})"), ("tl.minimum({}, {})", "np.fmin({}, {})"),
               ("tl.where({0} > {1}, {0}, {1})", "np.where({0} > {1}, {0}, {1})")],
    # discontinuous: only where the compiler and NumPy round alike (not in float16, which the
    # compiler computes in float between stores)
    "exact": {"unary": [("tl.floor({})", "np.floor({})")],
              "binary": [("({} % (tl.abs({}) + 1.0))", "np.fmod({}, np.abs({}) + 1.0)")]},
    "reduce": ["sum", "max", "min"],
}
INT = {
    "leaves": st.sampled_from([("x", "x"), ("y", "y")]) | st.sampled_from([-3, 1, 7]).map(lambda c: (str(c), str(c))),
    "unary": [("(-{})", "(-{})"), ("tl.abs({})", "np.abs({})"), ("(~{})", "(~{})"), ("({} << 2)", "({} << 2)"),
              ("({} >> 1)", "({} >> 1)")],
    "binary": [("({} + {})", "({} + {})"), ("({} - {})", "({} - {})"), ("({} * {})", "({} * {})"),
               ("({} & {})", "({} & {})"), ("({} | {})", "({} | {})"), ("({} ^ {})", "({} ^ {})"),
               ("({0} // tl.where({1} == 0, 7, {1}))", "c_div({0}, np.where({1} == 0, 7, {1}))"),
               ("({0} % tl.where({1} == 0, -3, {1}))", "c_mod({0}, np.where({1} == 0, -3, {1}))"),
               ("tl.maximum({}, {})", "np.maximum({}, {})"), ("tl.minimum({}, {})", "np.minimum({}, {})"),
               ("tl.where({0} < {1}, {0} * 3, {1} - 7)", "np.where({0} < {1}, {0} * 3, {1} - 7)")],
    "exact": {"unary": [], "binary": []},
    "reduce": ["sum", "max", "min", "xor_sum"],
}
KINDS = {"float32": FLOAT, "float16": FLOAT, "int32": INT, "int8": INT}


def identity(reduce: str, dtype: str) -> str:
    if reduce in ("sum", "xor_sum"):
        return "0" if dtype.startswith("int") else "0.0"
    if dtype.startswith("int"):
        info = np.iinfo(dtype)
        return str(info.min if reduce == "max" else info.max)
    return "-float('inf')" if reduce == "max" else "float('inf')"


def expressions(dtype: str):
    kind = KINDS[dtype]
    exact = dtype != "float16"
    unaries = kind["unary"] + (kind["exact"]["unary"] if exact else [])
    binaries = kind["binary"] + (kind["exact"]["binary"] if exact else [])

    def extend(children):
        unary = st.tuples(st.sampled_from(unaries), children.filter(_typed)).map(lambda t: _render(t[0], t[1]))
        binary = st.tuples(st.sampled_from(binaries), children, children).filter(
            lambda t: _typed(t[1]) or _typed(t[2])).map(lambda t: _render(t[0], t[1], t[2]))
        return unary | binary

    return st.recursive(kind["leaves"], extend, max_leaves=6).filter(_typed)


KERNEL = '''import ember.triton as triton
import ember.triton.language as tl


@triton.jit
def kernel(x_ptr, y_ptr, out_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.arange(0, BC)
    mask = (rows[:, None] < R) & (cols[None, :] < C)
    offs = rows[:, None] * C + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=1)
    y = tl.load(y_ptr + offs, mask=mask, other=1)
    v = {expr}
{tail}'''
TAILS = {
    None: "    tl.store(out_ptr + offs, v, mask=mask)\n",
    "masked": "    tl.store(out_ptr + offs, v, mask=mask & (x > y))\n",
    1: "    v = tl.where(mask, v, {identity})\n    tl.store(out_ptr + rows, tl.{reduce}(v, axis=1), mask=rows < R)\n",
    0: "    v = tl.where(mask, v, {identity})\n    tl.store(out_ptr + cols, v.{reduce}(axis=0), mask=cols < C)\n",
}


@st.composite
def kernels(draw):
    """(kernel source, NumPy expression, dtype, reduction, axis, R, C, BR)."""
    dtype = draw(st.sampled_from(list(KINDS)))
    expr, reference = draw(expressions(dtype))
    axis = draw(st.sampled_from([None, "masked", 0, 1]))
    reduce = draw(st.sampled_from(KINDS[dtype]["reduce"])) if axis in (0, 1) else None
    R, C = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    BR = triton.next_power_of_2(R) if axis == 0 else draw(st.sampled_from([1, 2, 4, 8, 16]))
    tail = TAILS[axis].format(identity=identity(reduce, dtype) if reduce else None, reduce=reduce)
    return KERNEL.format(expr=expr, tail=tail), reference, dtype, reduce, axis, R, C, BR


_modules = {}
_counter = itertools.count()


def load_kernel(folder, source: str):
    """The kernel of `source`, from a .py file of its own (one module per distinct source)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    if digest not in _modules:
        path = folder / f"tile_random_{digest}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"tile_random_{digest}_{next(_counter)}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[digest] = module.kernel
    return _modules[digest]


def inputs(dtype, R, C, seed):
    rng = np.random.default_rng(seed)
    if dtype.startswith("float"):
        return tuple(rng.standard_normal((R, C), dtype=np.float32).astype(dtype) for _ in range(2))
    high = 1000 if dtype == "int32" else 100
    return tuple(rng.integers(-high, high, (R, C)).astype(dtype) for _ in range(2))


def run(kernel, x, y, reduce, axis, BR, mode):
    R, C = x.shape
    out = np.zeros((R, C) if axis in (None, "masked") else (R if axis == 1 else C), x.dtype)
    with launch_mode(mode):
        kernel[(triton.cdiv(R, BR),)](x, y, out, R, C, BR=BR, BC=triton.next_power_of_2(C))
    return out


def expected(reference, x, y, reduce, axis):
    with np.errstate(all="ignore"):
        v = np.asarray(eval(reference, {"np": np, "c_div": c_div, "c_mod": c_mod}, {"x": x, "y": y}))
        v = np.broadcast_to(v, x.shape).astype(x.dtype)
        if axis == "masked":
            return np.where(x > y, v, np.zeros_like(v))
        if reduce is None:
            return v
        if reduce == "sum":
            return v.sum(axis=axis, dtype=x.dtype)
        if reduce == "xor_sum":
            return np.bitwise_xor.reduce(v, axis=axis)
        return getattr(v, reduce)(axis=axis)


def check_close(got, want, dtype, what):
    if dtype.startswith("int"):
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        want = np.asarray(want, np.float64)
        scale = 1 + np.abs(want[np.isfinite(want)]).max(initial=0)
        rtol, atol = (1e-4, 1e-5 * scale) if dtype == "float32" else (2e-2, 2e-2 * scale)
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol, err_msg=what)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=kernels(), seed=st.integers(0, 2**32 - 1))
def test_random_kernels_interpreted_match_numpy(tmp_path_factory, case, seed):
    source, reference, dtype, reduce, axis, R, C, BR = case
    kernel = load_kernel(tmp_path_factory.getbasetemp(), source)
    x, y = inputs(dtype, R, C, seed)
    check_close(run(kernel, x, y, reduce, axis, BR, "interpret"), expected(reference, x, y, reduce, axis), dtype,
                source)


@pytest.mark.skipif(not HAS_COMPILER, reason="ember.triton.compiler (the tile-language compiler) is not in this tree")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=kernels(), seed=st.integers(0, 2**32 - 1))
def test_random_kernels_compiled_match_interpreted(tmp_path_factory, case, seed):
    source, reference, dtype, reduce, axis, R, C, BR = case
    kernel = load_kernel(tmp_path_factory.getbasetemp(), source)
    x, y = inputs(dtype, R, C, seed)
    check_close(run(kernel, x, y, reduce, axis, BR, "compile"), run(kernel, x, y, reduce, axis, BR, "interpret"),
                dtype, source)
