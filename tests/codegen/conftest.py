from __future__ import annotations

import numpy as np
import pytest

from ember.runtime.module import build_c, build_python


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("ember-cache")


@pytest.fixture(autouse=True)
def _cache_dir(cache_root, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(cache_root))


def check_kernel(func, args, expected: dict, *, rtol: float = 0.0, atol: float = 0.0, kernel=None):
    """Run `func` on the C target (or the given C `kernel`) and on the interpreter, each on fresh
    copies of `args`, and compare the outputs `expected` ({argument position: array}): exactly
    when rtol == atol == 0, else to the tolerances (NaNs equal). Returns the arrays of each run."""
    runs = {}
    for target, k in (("c", kernel or build_c(func)), ("python", build_python(func))):
        arrays = [a.copy() for a in args]
        k(*arrays)
        for pos, want in expected.items():
            got, msg = arrays[pos], f"target {target!r}, output {func.params[pos].name}"
            assert got.dtype == args[pos].dtype, msg
            if rtol == atol == 0:
                np.testing.assert_array_equal(got, want, err_msg=msg)
            else:
                np.testing.assert_allclose(got.astype("float64"), np.asarray(want).astype("float64"),
                                           rtol=rtol, atol=atol, err_msg=msg)
        runs[target] = arrays
    return runs


@pytest.fixture
def check():
    return check_kernel
