"""Buffer compaction places each scratch buffer at the innermost loop around all its uses, shrunk
to what one iteration touches: several buffers at one loop and one at an outer loop, placed
together, compute what NumPy does, as they do unplaced."""

import re

import numpy as np
import pytest

import ember
from ember import te


def kernel():
    """A row sum and a square per row (compacted to a row), and a sum of two rows per batch
    (compacted to one row, at the outer loop)."""
    X = te.placeholder((4, 6, 16), name="X")
    k = te.reduce_axis((0, 16), name="k")
    total = te.compute((4, 6), lambda b, r: te.sum(X[b, r, k], axis=k), name="total")
    sq = te.compute((4, 6, 16), lambda b, r, j: X[b, r, j] * X[b, r, j], name="sq")
    m = te.compute((4, 16), lambda b, j: X[b, 0, j] + X[b, 5, j], name="m")
    out = te.compute((4, 6, 16), lambda b, r, j: sq[b, r, j] - total[b, r] + m[b, j], name="out")
    s = te.create_schedule(out.op)
    b, r, _ = out.op.axis
    s[total].compute_at(s[out], r)
    s[sq].compute_at(s[out], r)
    s[m].compute_at(s[out], b)
    return s, [X, out]


def test_placed_at_their_loops():
    s, args = kernel()
    text = str(ember.lower(s, args, skip=["vectorize", "unroll"]))
    placed = {name: (len(indent), shape) for indent, name, shape in
              re.findall(r"^( *)(\w+) = alloc\(\(([\d, ]+)\)", text, re.M)}
    assert placed == {"m": (8, "1, 16"), "total": (12, "1, 1"), "sq": (12, "1, 1, 16")}, text


@pytest.mark.parametrize("target", ["c", "python"])
def test_computes_what_numpy_does(target):
    s, args = kernel()
    x = np.random.default_rng(0).standard_normal((4, 6, 16)).astype("float32")
    want = x * x - x.sum(-1, keepdims=True) + (x[:, 0] + x[:, 5])[:, None, :]
    for skip in ([], ["compact_buffers"]):
        out = np.full((4, 6, 16), np.nan, "float32")
        ember.build(s, args, target=target, skip=skip)(x, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
