"""Argument checks: every wrong call raises an error that names the argument and what to do."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import ArgumentTypeError, ShapeError
from ember.runtime.args import Signature
from ember.runtime.module import build_python
from ember.tir.expr import Buffer, Var, const
from ember.tir.stmt import BufferStore, For, PrimFunc

rng = np.random.default_rng(1)


def _arrays(*sizes, dtype="float32"):
    return [rng.standard_normal(s).astype(dtype) for s in sizes]


def test_binds_sizes_in_order(vadd):
    a, b, c = _arrays(10, 10, 10)
    assert Signature(vadd).bind([a, b, c]) == [10]


def test_argument_count_names_the_parameters(vadd):
    with pytest.raises(ArgumentTypeError, match=r"vadd takes 3 arguments \(A, B, C\), got 2"):
        Signature(vadd).bind(_arrays(4, 4))


def test_not_an_array(vadd):
    a, _, c = _arrays(4, 4, 4)
    with pytest.raises(ArgumentTypeError, match=r"argument 2 \('B'\) must be a numpy.ndarray, got list"):
        Signature(vadd).bind([a, [1.0] * 4, c])


def test_wrong_dtype(vadd):
    a, c = _arrays(4, 4)
    with pytest.raises(ArgumentTypeError, match="argument 'B' has dtype float64, expected float32"):
        Signature(vadd).bind([a, np.ones(4), c])


def test_not_contiguous_suggests_ascontiguousarray(vadd):
    a, b, c = _arrays(8, 8, 4)
    with pytest.raises(ArgumentTypeError, match=r"'B' is not C-contiguous.*np.ascontiguousarray\(B\)"):
        Signature(vadd).bind([a[:4], b[::2], c])


def test_wrong_rank(vadd):
    a, b = _arrays(4, 4)
    with pytest.raises(ShapeError, match=r"argument 'C' has 2 dimensions, expected 1 \(shape \(n,\)\)"):
        Signature(vadd).bind([a, b, np.zeros((2, 2), "float32")])


def test_inconsistent_sizes_name_both_arguments(vadd):
    with pytest.raises(ShapeError, match=r"size n is 4 from argument 'A' \(dimension 0\) but 5 from "
                                         r"argument 'B' \(dimension 0\)"):
        Signature(vadd).bind(_arrays(4, 5, 4))


def _shifted():
    """B has n + 1 elements, C has 2 * n, D is (3, n - 1)."""
    n, i = Var("n"), Var("i")
    A, B, C = Buffer("A", (n,)), Buffer("B", (n + 1,)), Buffer("C", (2 * n,))
    D = Buffer("D", (const(3), n - 1))
    body = For(i, const(0), n, "serial", BufferStore(C, A[i] + B[i + 1], (i,)))
    return PrimFunc("shifted", (A, B, C, D), body)


def test_dimensions_of_var_plus_constant_bind_and_check():
    sig = Signature(_shifted())
    assert sig.bind(_arrays(5, 6, 10, (3, 4))) == [5]
    assert sig.bind(_arrays(6, 7, 12, (3, 5))) == [6]
    with pytest.raises(ShapeError, match=r"size n is 5 from argument 'A' \(dimension 0\) but 6 from "
                                         r"argument 'D' \(dimension 1\)"):
        sig.bind(_arrays(5, 6, 10, (3, 5)))
    with pytest.raises(ShapeError, match=r"argument 'D' dimension 0: expected 3, got 2"):
        sig.bind(_arrays(5, 6, 10, (2, 4)))
    with pytest.raises(ShapeError, match="argument 'C' .* has size 11, which gives no valid size n"):
        sig.bind(_arrays(5, 6, 11, (3, 4)))


def test_a_size_no_dimension_determines():
    n, i = Var("n"), Var("i")
    A = Buffer("A", (n * n,))
    f = PrimFunc("square", (A,), For(i, const(0), n, "serial", BufferStore(A, A[i], (i,))))
    with pytest.raises(ShapeError, match="cannot infer size n of square"):
        Signature(f).bind(_arrays(16))


def test_dimensions_that_bind_nothing_are_evaluated_and_checked():
    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,)), Buffer("B", (n * n + 1,))
    f = PrimFunc("sq", (A, B), For(i, const(0), n, "serial", BufferStore(B, A[i], (i,))))
    assert Signature(f).bind(_arrays(3, 10)) == [3]
    with pytest.raises(ShapeError, match=r"argument 'B' dimension 0: expected 10 \(n \* n \+ 1 with n=3\), "
                                         r"got 9 \(shape \(9,\), expected \(n \* n \+ 1,\)\)"):
        Signature(f).bind(_arrays(3, 9))


def test_outputs_must_be_writable_and_not_overlap(vadd):
    a, b, c = _arrays(4, 4, 4)
    c.flags.writeable = False
    with pytest.raises(ArgumentTypeError, match="argument 'C' is read-only, but vadd writes it"):
        Signature(vadd).bind([a, b, c])
    with pytest.raises(ArgumentTypeError, match="arguments 'C' and 'A' share memory"):
        Signature(vadd).bind([a, b, a])
    a.flags.writeable = False  # inputs may be read-only, and may alias each other
    Signature(vadd).bind([a, a, np.zeros(4, "float32")])


def test_kernels_check_before_running(vadd):
    with pytest.raises(ArgumentTypeError, match="dtype float64"):
        build_python(vadd)(np.ones(3), np.ones(3), np.ones(3))
