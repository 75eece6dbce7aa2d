"""The operator test helpers (ember/testing.py) catch what they are for: a kernel that
disagrees with PyTorch, a reference whose dtype is not the inferred one, symbols bound twice."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember.graph.core import TensorType
from ember.testing import assert_close, bind_symbols, build_op, check_op

RNG = np.random.default_rng()


def test_a_disagreement_with_torch_names_the_op_target_and_output():
    x = RNG.uniform(-1, 1, (3, 16)).astype("float32")
    with pytest.raises(AssertionError, match=r"relu on c, inputs of shapes \[\(3, 16\)\]: output 0 vs torch"):
        check_op("relu", [x], None, rtol=1e-6, atol=1e-6, torch_fn=torch.abs)


def test_outputs_start_as_garbage_and_symbols_bind_from_inputs():
    k = build_op("neg", [TensorType(("n", 4), "int32")], target="python")
    x = RNG.integers(-9, 9, (3, 4)).astype("int32")
    (out,) = k.run(x)
    np.testing.assert_array_equal(out, -x)
    with pytest.raises(ValueError, match="symbol 'n' is bound to both 3 and 5"):
        bind_symbols([TensorType(("n",)), TensorType(("n",))], [np.zeros(3), np.zeros(5)])


def test_assert_close_is_exact_for_integers_and_bools():
    assert_close(np.array([1.0, np.nan]), np.array([1.0 + 1e-9, np.nan]), rtol=1e-6, atol=0, what="floats")
    with pytest.raises(AssertionError, match="ints"):
        assert_close(np.array([1, 2]), np.array([1, 3]), rtol=1, atol=1, what="ints")
    with pytest.raises(AssertionError, match=r"shape \(2,\) != \(3,\)"):
        assert_close(np.zeros(2), np.zeros(3), rtol=0, atol=0, what="shapes")
