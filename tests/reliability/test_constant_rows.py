"""Normalizations and statistics of rows whose values are all equal: the deviations are exactly 0,
so the variance and standard deviation are 0 and a normalization gives its bias (0 without one),
as torch gives (where its float32 variance does not overflow) and as float64 gives. The row scale
of ember.ops.scaling used to be found with float arithmetic that the C compiler contracted into
fused multiply-adds, so it was not a power of two and equal rows came out +-1, 1.73, var inf and
std 9e21. One kernel per operator over a symbolic row length runs every length from 1 to 70, on
the compiled and the interpreted target."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember.graph.core import TensorType
from ember.testing import build_op

LENGTHS = range(1, 71)
MAGNITUDES = [0.0, 1e-45, 1e-30, 1.0, 1.2345, 1e4, 1e30, -3.7, -1e30, 3e38]


def _rows(n: int) -> np.ndarray:
    """Three rows per magnitude: the value, its negation, and the value times 1.1 (other mantissas)."""
    values = [v * f for v in MAGNITUDES for f in (1.0, -1.0, 1.1)]
    return np.repeat(np.array(values, "float32")[:, None], n, axis=1)


# operator, attributes, the (rows, n) input reshaped as the operator reads it, torch's function
CASES = {
    "layer_norm": ({"eps": 1e-5}, lambda x: x, lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:])),
    "rms_norm": ({"eps": 1e-6}, lambda x: x, None),
    "group_norm": ({"num_groups": 2, "eps": 1e-5}, lambda x: x[:, None, :].repeat(4, 1),
                   lambda t: torch.nn.functional.group_norm(t, 2)),
    # (torch's instance norm of an equal row is not 0 itself: 0.03 for a row of 1.36)
    "instance_norm": ({"eps": 1e-5}, lambda x: x[:, None, :].repeat(2, 1), None),
    "var": ({"axes": -1, "correction": 0}, lambda x: x, lambda t: t.var(-1, correction=0)),
    "std": ({"axes": -1, "correction": 1}, lambda x: x, lambda t: t.std(-1, correction=1)),
    "mean": ({"axes": -1}, lambda x: x, lambda t: t.mean(-1)),
}

IN_TYPES = {"layer_norm": ("r", "n"), "rms_norm": ("r", "n"), "var": ("r", "n"), "std": ("r", "n"),
            "mean": ("r", "n"), "group_norm": ("r", 4, "n"), "instance_norm": ("r", 2, "n")}


def _expected(name: str, x: np.ndarray, attrs) -> np.ndarray:
    """What float64 gives for equal rows: 0 deviations, so 0 (the norms, var, std; NaN for a
    std of one element, whose correction leaves no degree of freedom), and the value (mean; as
    in torch, +-inf where the float32 sum overflows)."""
    n = x.shape[-1]
    if name == "mean":
        v = x[..., 0].astype("float64")
        return np.where(np.abs(v) * n > np.finfo("float32").max, np.copysign(np.inf, v), v).astype("float32")
    if name == "rms_norm":  # x / sqrt(x^2 + eps): +-1 (0 for 0) where x^2 dominates eps
        x64 = x.astype("float64")
        return (x64 / np.sqrt(x64 * x64 + attrs["eps"])).astype("float32")
    if name in ("var", "std"):
        return np.full(x.shape[:-1], np.nan if n <= attrs["correction"] else 0.0, "float32")
    return np.zeros_like(x)


@pytest.mark.parametrize("target", ["c", "python"])
@pytest.mark.parametrize("name", list(CASES))
def test_equal_rows_have_no_deviation(name, target):
    attrs, shape, torch_fn = CASES[name]
    kernel = build_op(name, [TensorType(IN_TYPES[name], "float32")], attrs, target=target)
    lengths = LENGTHS if target == "c" else (1, 2, 3, 17, 70)  # the interpreter is slow
    for n in lengths:
        x = shape(_rows(n))
        out = kernel.run(x)[0]
        with np.errstate(over="ignore"):
            np.testing.assert_allclose(out, _expected(name, x, attrs), rtol=1e-5, atol=0,
                                       err_msg=f"{name} on {target}, rows of {n} equal values")
        if torch_fn is not None and n > 1:
            ordinary = np.abs(x).max(axis=tuple(range(1, x.ndim))) < 1e15  # torch's float32 squares overflow above
            want = torch_fn(torch.from_numpy(x[ordinary])).numpy()
            np.testing.assert_allclose(out[ordinary], want, rtol=1e-5, atol=0, err_msg=f"{name} vs torch, n={n}")
