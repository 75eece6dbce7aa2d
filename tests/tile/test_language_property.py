"""Random kernels of the tile language: hypothesis draws an elementwise expression over two
blocks (float32 or int32), optionally reduced along an axis, writes it as a @triton.jit kernel
into a .py file (@jit needs the source) and checks the interpreter against the same expression in
NumPy; and, where ember.triton.compiler exists, the compiled kernel against the interpreted one."""

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
    """C's integer division (toward zero), int32 as the kernel computes it."""
    a, b = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
    return (np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)).astype(np.int32)


def c_mod(a, b):
    return (np.asarray(a).astype(np.int64) - c_div(a, b).astype(np.int64) * np.asarray(b)).astype(np.int32)


def _render(template: tuple[str, str], *args) -> tuple[str, str]:
    return template[0].format(*(a[0] for a in args)), template[1].format(*(a[1] for a in args))


FLOAT = {
    "leaves": st.sampled_from([("x", "x"), ("y", "y")]) | st.sampled_from([-2.0, -0.5, 0.25, 1.5, 3.0]).map(
        lambda c: (repr(c), f"np.float32({c!r})")),
    "unary": [("(-{})", "(-{})"), ("tl.abs({})", "np.abs({})"), ("tl.exp(-tl.abs({}))", "np.exp(-np.abs({}))"),
              ("tl.sigmoid({})", "(1 / (1 + np.exp(-{})))"), ("tl.tanh({})", "np.tanh({})"),
              ("tl.sqrt(tl.abs({}) + 1.0)", "np.sqrt(np.abs({}) + np.float32(1.0))")],
    "binary": [("({} + {})", "({} + {})"), ("({} - {})", "({} - {})"), ("({} * {})", "({} * {})"),
               ("({} / (tl.abs({}) + 1.0))", "({} / (np.abs({}) + np.float32(1.0)))"),
               ("tl.maximum({}, {})", "np.fmax({}, {})"), ("tl.minimum({}, {})", "np.fmin({}, {})"),
               ("tl.where({0} > {1}, {0}, {1})", "np.where({0} > {1}, {0}, {1})")],
    "identity": {"sum": "0.0", "max": "-float('inf')", "min": "float('inf')"},
}
INT = {
    "leaves": st.sampled_from([("x", "x"), ("y", "y")]) | st.sampled_from([-3, 1, 7]).map(lambda c: (str(c), str(c))),
    "unary": [("(-{})", "(-{})"), ("tl.abs({})", "np.abs({})")],
    "binary": [("({} + {})", "({} + {})"), ("({} - {})", "({} - {})"), ("({} * {})", "({} * {})"),
               ("({} & {})", "({} & {})"), ("({} | {})", "({} | {})"), ("({} ^ {})", "({} ^ {})"),
               ("({0} // tl.where({1} == 0, 7, {1}))", "c_div({0}, np.where({1} == 0, 7, {1}))"),
               ("({0} % tl.where({1} == 0, 7, {1}))", "c_mod({0}, np.where({1} == 0, 7, {1}))"),
               ("tl.maximum({}, {})", "np.maximum({}, {})"), ("tl.minimum({}, {})", "np.minimum({}, {})")],
    "identity": {"sum": "0", "max": "-2147483648", "min": "2147483647"},
}


def expressions(kind: dict, compiled: bool):
    binaries = kind["binary"]

    def extend(children):
        unary = st.tuples(st.sampled_from(kind["unary"]), children).map(lambda t: _render(t[0], t[1]))
        binary = st.tuples(st.sampled_from(binaries), children, children).map(
            lambda t: _render(t[0], t[1], t[2]))
        return unary | binary

    return st.recursive(kind["leaves"], extend, max_leaves=6).filter(lambda e: re.search(r"\b[xy]\b", e[0]))


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
    1: "    v = tl.where(mask, v, {identity})\n    tl.store(out_ptr + rows, tl.{reduce}(v, axis=1), mask=rows < R)\n",
    0: "    v = tl.where(mask, v, {identity})\n    tl.store(out_ptr + cols, tl.{reduce}(v, axis=0), mask=cols < C)\n",
}


@st.composite
def kernels(draw, compiled: bool = False):
    """(kernel source, NumPy expression, dtype, reduction, axis, R, C, BR)."""
    dtype = draw(st.sampled_from(["float32", "int32"]))
    kind = FLOAT if dtype == "float32" else INT
    expr, reference = draw(expressions(kind, compiled))
    axis = draw(st.sampled_from([None, 0, 1]))
    reduce = draw(st.sampled_from(["sum", "max", "min"])) if axis is not None else None
    R, C = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    BR = triton.next_power_of_2(R) if axis == 0 else draw(st.sampled_from([1, 2, 4, 8, 16]))
    tail = TAILS[axis].format(identity=kind["identity"].get(reduce), reduce=reduce)
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
    if dtype == "float32":
        return rng.standard_normal((R, C), dtype=np.float32), rng.standard_normal((R, C), dtype=np.float32)
    return rng.integers(-1000, 1000, (R, C)).astype(np.int32), rng.integers(-1000, 1000, (R, C)).astype(np.int32)


def run(kernel, x, y, reduce, axis, BR, mode):
    R, C = x.shape
    out = np.zeros((R, C) if axis is None else (R if axis == 1 else C), x.dtype)
    with launch_mode(mode):
        kernel[(triton.cdiv(R, BR),)](x, y, out, R, C, BR=BR, BC=triton.next_power_of_2(C))
    return out


def expected(reference, x, y, reduce, axis):
    with np.errstate(all="ignore"):
        v = np.asarray(eval(reference, {"np": np, "c_div": c_div, "c_mod": c_mod}, {"x": x, "y": y}))
        v = np.broadcast_to(v, x.shape).astype(x.dtype)
        if reduce is None:
            return v
        if reduce == "sum":
            return v.sum(axis=axis, dtype=x.dtype)
        return getattr(v, reduce)(axis=axis)


def check_close(got, want, dtype, what):
    if dtype == "int32":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        scale = 1 + np.abs(want).max(initial=0)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale, err_msg=what)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=kernels(), seed=st.integers(0, 2**32 - 1))
def test_random_kernels_interpreted_match_numpy(tmp_path_factory, case, seed):
    source, reference, dtype, reduce, axis, R, C, BR = case
    kernel = load_kernel(tmp_path_factory.getbasetemp(), source)
    x, y = inputs(dtype, R, C, seed)
    check_close(run(kernel, x, y, reduce, axis, BR, "interpret"), expected(reference, x, y, reduce, axis), dtype,
                source)


@pytest.mark.skipif(not HAS_COMPILER, reason="ember.triton.compiler (the tile-language compiler) is not in this tree")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=kernels(compiled=True), seed=st.integers(0, 2**32 - 1))
def test_random_kernels_compiled_match_interpreted(tmp_path_factory, case, seed):
    source, reference, dtype, reduce, axis, R, C, BR = case
    kernel = load_kernel(tmp_path_factory.getbasetemp(), source)
    x, y = inputs(dtype, R, C, seed)
    check_close(run(kernel, x, y, reduce, axis, BR, "compile"), run(kernel, x, y, reduce, axis, BR, "interpret"),
                dtype, source)
