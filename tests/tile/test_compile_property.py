"""Random elementwise and reduction kernels of the tile language, compiled, against NumPy on the
same (zero-padded) blocks: every drawn expression over masked 2-D loads, stored whole or reduced
along an axis, with sizes the blocks do not divide."""

import importlib.util
import itertools
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

UNARY = {
    "tl.abs({})": np.abs, "tl.exp(tl.minimum({}, 4.0))": lambda a: np.exp(np.minimum(a, 4.0)),
    "tl.sqrt(tl.abs({}))": lambda a: np.sqrt(np.abs(a)), "tl.sigmoid({})": lambda a: 1 / (1 + np.exp(-a)),
    "tl.tanh({})": np.tanh, "(-{})": np.negative, "({} * 0.5)": lambda a: a * 0.5,
}
BINARY = {
    "({} + {})": np.add, "({} - {})": np.subtract, "({} * {})": np.multiply,
    "tl.maximum({}, {})": np.maximum, "tl.minimum({}, {})": np.minimum,
    "tl.where({0} > {1}, {0}, {1} * 2.0)": lambda a, b: np.where(a > b, a, b * 2.0),
}
REDUCE = {"tl.sum": np.sum, "tl.max": np.max, "tl.min": np.min}


def expressions():
    leaves = st.sampled_from([("x", lambda x, y: x), ("y", lambda x, y: y)])

    def extend(children):
        unary = st.tuples(st.sampled_from(sorted(UNARY)), children).map(
            lambda t: (t[0].format(t[1][0]), lambda x, y, f=UNARY[t[0]], a=t[1][1]: f(a(x, y))))
        binary = st.tuples(st.sampled_from(sorted(BINARY)), children, children).map(
            lambda t: (t[0].format(t[1][0], t[2][0]),
                       lambda x, y, f=BINARY[t[0]], a=t[1][1], b=t[2][1]: f(a(x, y), b(x, y))))
        return unary | binary

    return st.recursive(leaves, extend, max_leaves=5)


TEMPLATE = '''
import ember.triton as triton
import ember.triton.language as tl


@triton.jit
def kernel(x_ptr, y_ptr, out_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.arange(0, BC)
    m = (rows[:, None] < R) & (cols[None, :] < C)
    x = tl.load(x_ptr + rows[:, None] * C + cols[None, :], mask=m, other=0.0)
    y = tl.load(y_ptr + rows[:, None] * C + cols[None, :], mask=m, other=0.0)
    v = {expr}
{store}
'''
STORE_WHOLE = "    tl.store(out_ptr + rows[:, None] * C + cols[None, :], v, mask=m)"
STORE_ROWS = "    tl.store(out_ptr + rows, {fn}(v, axis=1), mask=rows < R)"
STORE_COLS = "    tl.store(out_ptr + tl.program_id(0) * BC + cols, {fn}(v, axis=0), mask=cols < C)"
_modules = itertools.count()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.delenv("EMBER_INTERPRET", raising=False)
    mp.delenv("TRITON_INTERPRET", raising=False)
    yield tmp_path_factory.mktemp("kernels")
    mp.undo()


def load(folder, source: str):
    name = f"drawn_kernel_{next(_modules)}"
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.kernel


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(expr=expressions(), how=st.sampled_from(["whole", "rows", "cols"]), fn=st.sampled_from(sorted(REDUCE)),
       rows=st.integers(1, 19), cols=st.integers(1, 21), seed=st.integers(0, 2**32 - 1))
def test_drawn_kernels_match_numpy(folder, expr, how, fn, rows, cols, seed):
    text, reference = expr
    store = {"whole": STORE_WHOLE, "rows": STORE_ROWS, "cols": STORE_COLS}[how].format(fn=fn)
    kernel = load(folder, TEMPLATE.format(expr=text, store=store))
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
    br, bc = 8, 32
    programs = -(-rows // br)
    # the blocks as the kernel sees them: masked elements load 0.0
    xp, yp = (np.pad(a, ((0, programs * br - rows), (0, bc - cols))).astype(np.float64) for a in (x, y))
    v = reference(xp, yp)
    if how == "whole":
        out = np.full((rows, cols), np.nan, np.float32)
        want = v[:rows, :cols]
    elif how == "rows":
        out = np.full(rows, np.nan, np.float32)
        want = REDUCE[fn](v, axis=1)[:rows]
    else:
        out = np.full((programs, bc), np.nan, np.float32)
        want = REDUCE[fn](v.reshape(programs, br, bc), axis=1)
        want[:, cols:] = np.nan
    kernel[(programs,)](x, y, out, rows, cols, BR=br, BC=bc)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5, err_msg=text)
