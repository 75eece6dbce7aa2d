"""dynamic_slice (ember/ops/dynamic_slice.py): windows of static sizes at starts read at run time,
compiled to C and on the interpreter against the NumPy reference and NumPy slicing: one axis and
several, negative starts, starts clamped so the window fits; and the errors of bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.testing import build_op

RNG = np.random.default_rng()


def test_windows_at_run_time_starts():
    x = RNG.uniform(-1, 1, (5, 6, 7)).astype("float32")
    for target in ("c", "python"):
        one = build_op("dynamic_slice", [TensorType(x.shape), TensorType((1,), "int64")], {"axes": (1,), "sizes": (3,)},
                       target)
        # in range, negative (from the end), past the end and before the start (clamped to fit)
        for start, at in [(0, 0), (2, 2), (3, 3), (-4, 2), (5, 3), (-9, 0)]:
            (out,) = one.run(x, np.array([start], "int64"))
            np.testing.assert_array_equal(out, x[:, at:at + 3], err_msg=f"start {start} on {target}")
    two = build_op("dynamic_slice", [TensorType(x.shape), TensorType((2,), "int32")], {"axes": (2, 0), "sizes": (4, 1)})
    for starts in ([0, 4], [3, 0], [-4, -1]):
        s = np.array(starts, "int32")
        (out,) = two.run(x, s)
        np.testing.assert_array_equal(out, x[s[1] % 5:s[1] % 5 + 1, :, s[0] % 7:s[0] % 7 + 4])


@pytest.mark.parametrize("starts, attrs, match", [
    (TensorType((2,), "int64"), {"axes": (1,), "sizes": (2,)}, r"starts must be 1 integer\(s\), one per axis"),
    (TensorType((1,), "float32"), {"axes": (1,), "sizes": (2,)}, "starts must be 1 integer"),
    (TensorType((1,), "int64"), {"axes": (1,), "sizes": (7,)}, "the size along axis 1 must be an int from 0 to 6"),
    (TensorType((2,), "int64"), {"axes": (1, 1), "sizes": (2, 2)}, "must be distinct axes"),
    (TensorType((1,), "int64"), {"axes": (0,), "sizes": (2,)}, "axis 0 is the symbolic dimension 'n'"),
])
def test_errors(starts, attrs, match):
    with pytest.raises(OpTypeError, match=match):
        infer_types("dynamic_slice", [TensorType(("n", 6, 7)), starts], attrs)
