"""nonzero and unique (ember.ops.dynamic): the references against their definitions, on random
data (hypothesis), and the types they infer."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ember.errors import LowerError
from ember.graph import TensorType
from ember.ops import OpTypeError, get, infer_types

SMALL_INTS = hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), elements=st.integers(-2, 2))


def _run(op, x, **attrs):
    return get(op).reference([x], get(op).bind_attrs({"dim": "n", **attrs}))


@settings(max_examples=40, deadline=None)
@given(x=SMALL_INTS)
def test_nonzero_is_argwhere(x):
    (out,) = _run("nonzero", x)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, np.argwhere(x).T.reshape(x.ndim, -1))


@settings(max_examples=60, deadline=None)
@given(x=SMALL_INTS, sorted_=st.booleans(), data=st.data())
def test_unique_definition(x, sorted_, data):
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    values, first, inverse, counts = _run("unique", x, axis=axis, sorted=sorted_)
    flat = x.reshape(-1) if axis is None else np.moveaxis(x, axis, 0)
    vals = values if axis is None else np.moveaxis(values, axis, 0)
    np.testing.assert_array_equal(vals[inverse], flat)  # every element (slice) is its value
    np.testing.assert_array_equal(flat[first], vals)  # the first occurrence is that value
    np.testing.assert_array_equal(counts, np.bincount(inverse, minlength=len(vals)))
    assert len({v.tobytes() for v in vals}) == len(vals)  # distinct
    for k, f in enumerate(first):  # first: no earlier element (slice) has the value
        assert not any(np.array_equal(flat[j], vals[k]) for j in range(f))
    if not sorted_:
        assert list(first) == sorted(first)
    elif axis is None:
        assert list(vals) == sorted(vals)


def test_types():
    ((t,),) = [infer_types("nonzero", [TensorType((3, "B"), "float32")], {"dim": "nz"})[1]]
    assert t == TensorType((2, "nz"), "int64")
    _, types = infer_types("unique", [TensorType((4, 6), "float32")], {"dim": "u", "axis": 1})
    assert types == [TensorType((4, "u"), "float32"), TensorType(("u",), "int64"), TensorType((6,), "int64"),
                     TensorType(("u",), "int64")]
    with pytest.raises(OpTypeError, match="scalar"):
        infer_types("nonzero", [TensorType((), "float32")], {"dim": "nz"})
    with pytest.raises(OpTypeError, match="static shape"):
        infer_types("unique", [TensorType((3, "B"), "float32")], {"dim": "u"})
    with pytest.raises(OpTypeError, match="dim"):
        infer_types("nonzero", [TensorType((3,), "float32")], {"dim": ""})


def test_no_kernel():
    with pytest.raises(LowerError, match="on the host"):
        get("nonzero").compute([], get("nonzero").bind_attrs({"dim": "n"}), [])
