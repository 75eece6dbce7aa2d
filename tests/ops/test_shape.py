"""Shape operators (ember/ops/shape.py) against their NumPy references and PyTorch on the C target:
reshape, flatten, squeeze, unsqueeze, transpose, expand, concat, split, slice (ONNX clamping,
negative steps); symbolic dimensions kept, moved and broadcast (a reshape built once and run at
two batch sizes); tiny cases on the interpreter; and the errors of bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.testing import check_op, check_op_sizes

RNG = np.random.default_rng()
EXACT = {"rtol": 0, "atol": 0}


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


@pytest.mark.parametrize("op, shape, attrs, torch_fn", [
    ("reshape", (2, 3, 4), {"shape": (6, 4)}, lambda t: t.reshape(6, 4)),
    ("reshape", (2, 3, 4), {"shape": (4, 1, 6)}, lambda t: t.reshape(4, 1, 6)),
    ("flatten", (2, 3, 4, 5), None, lambda t: t.flatten(1)),
    ("flatten", (2, 3, 4, 5), {"start_dim": 0, "end_dim": -2}, lambda t: t.flatten(0, -2)),
    ("squeeze", (2, 1, 4, 1), None, torch.squeeze),
    ("squeeze", (2, 1, 4, 1), {"axes": (-1,)}, lambda t: t.squeeze(-1)),
    ("unsqueeze", (2, 3), {"axes": (0, -1)}, lambda t: t.unsqueeze(0).unsqueeze(-1)),
    ("transpose", (2, 3, 4), {"perm": (2, 0, 1)}, lambda t: t.permute(2, 0, 1)),
    ("transpose", (2, 3, 4, 5), {"perm": (0, 2, 1, 3)}, lambda t: t.permute(0, 2, 1, 3)),
    ("expand", (3, 1, 4), {"shape": (2, 3, 5, 4)}, lambda t: t.expand(2, 3, 5, 4)),
    ("expand", (3, 1, 4), {"shape": (1, 4)}, lambda t: t),
])
def test_shape_ops_against_torch(op, shape, attrs, torch_fn):
    check_op(op, [rand(*shape)], attrs, **EXACT, torch_fn=torch_fn)


def test_concat_and_split_against_torch():
    a, b, c = rand(2, 3, 4), rand(2, 1, 4), rand(2, 5, 4)
    check_op("concat", [a, b, c], {"axis": 1}, **EXACT, torch_fn=lambda *t: torch.cat(t, 1))
    check_op("concat", [a, a], {"axis": -1}, **EXACT, torch_fn=lambda *t: torch.cat(t, -1))
    check_op("split", [c], {"axis": 1, "sizes": (1, 0, 4)}, **EXACT,
             torch_fn=lambda t: torch.split(t, [1, 0, 4], 1))


@pytest.mark.parametrize("attrs, numpy_index", [
    ({"starts": (1,), "ends": (3,)}, np.s_[1:3]),
    ({"starts": (0, -3), "ends": (100, -1), "axes": (2, 1)}, np.s_[:, -3:-1, 0:]),
    ({"starts": (-1,), "ends": (-100,), "axes": (2,), "steps": (-2,)}, np.s_[:, :, ::-2]),
    ({"starts": (10, 2), "ends": (0, -10), "axes": (0, 1), "steps": (-1, -1)}, np.s_[10:0:-1, 2::-1]),
    ({"starts": (4,), "ends": (2,), "axes": (1,)}, np.s_[:, 4:2]),
])
def test_slice_clamps_like_onnx(attrs, numpy_index):
    x = rand(3, 5, 7)
    (out,) = check_op("slice", [x], attrs, **EXACT)
    np.testing.assert_array_equal(out, x[numpy_index])


def test_symbolic_dims():
    types = [TensorType(("batch", 3, 4))]
    check_op_sizes("reshape", types, {"shape": ("batch", 12)}, [[rand(2, 3, 4)], [rand(5, 3, 4)]], **EXACT,
                   torch_fn=lambda t: t.reshape(t.shape[0], 12))
    check_op_sizes("transpose", types, {"perm": (1, 0, 2)}, [[rand(2, 3, 4)]], **EXACT)
    check_op_sizes("unsqueeze", types, {"axes": (1,)}, [[rand(2, 3, 4)]], **EXACT)
    attrs, (out,) = infer_types("flatten", [TensorType(("batch", 1, 4))], {"start_dim": 0, "end_dim": 1})
    assert out.shape == ("batch", 4)
    attrs, (out,) = infer_types("expand", [TensorType((1, "seq"))], {"shape": (3, 1)})
    assert out.shape == (3, "seq")


@pytest.mark.parametrize("op, shapes, attrs", [
    ("reshape", [(2, 3)], {"shape": (3, 2)}),
    ("concat", [(2, 2), (1, 2)], {"axis": 0}),
    ("slice", [(5,)], {"starts": (-1,), "ends": (-6,), "steps": (-2,)}),
    ("split", [(2, 5)], {"axis": 1, "sizes": (2, 3)}),
])
def test_tiny_shape_ops_on_the_interpreter(op, shapes, attrs):
    check_op(op, [rand(*s) for s in shapes], attrs, **EXACT, targets=("c", "python"))


def test_integer_and_bool_data_move_exactly():
    x = RNG.integers(-100, 100, (3, 4)).astype("int64")
    check_op("transpose", [x], {"perm": (1, 0)}, **EXACT)
    check_op("concat", [x > 0, x < 0], {"axis": 0}, **EXACT)


@pytest.mark.parametrize("op, shapes, attrs, message", [
    ("reshape", [(2, 3)], {"shape": (4, 2)}, "cannot reshape (2, 3) into (4, 2)"),
    ("reshape", [("b", 3)], {"shape": (6,)}, "cannot reshape"),
    ("reshape", [(2, 3)], {"shape": (-1, 3)}, "no -1"),
    ("flatten", [(2, 3, 4)], {"start_dim": 2, "end_dim": 1}, "start_dim 2 comes after end_dim 1"),
    ("squeeze", [(2, 3)], {"axes": (1,)}, "dimension 1 of (2, 3) is 3, not 1"),
    ("unsqueeze", [(2, 3)], {"axes": (0, 0)}, "repeat a dimension"),
    ("unsqueeze", [(2, 3)], {"axes": (4,)}, "axis 4 is out of range"),
    ("transpose", [(2, 3, 4)], {"perm": (0, 0, 1)}, "not a permutation"),
    ("expand", [(2, 3)], {"shape": (4, 3)}, "do not broadcast"),
    ("concat", [(2, 3), (2, 4)], {"axis": 0}, "differ outside axis 0"),
    ("split", [(2, 5)], {"axis": 1, "sizes": (2, 2)}, "add up to 4, not to dimension 1 of size 5"),
    ("slice", [(2, 5)], {"starts": (0,), "ends": (1,), "steps": (0,)}, "step 0"),
    ("slice", [(2, 5)], {"starts": (0, 1), "ends": (1,)}, "different lengths"),
])
def test_shape_errors(op, shapes, attrs, message):
    with pytest.raises(OpTypeError) as e:
        infer_types(op, [TensorType(s) for s in shapes], attrs)
    assert op in str(e.value) and message in str(e.value)
