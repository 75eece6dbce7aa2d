"""The arithmetic simplifier's known rewrites: constant folding, linear forms, floor division and
modulo, comparisons, logic, vectors (random expressions: test_simplify_random.py; statements:
test_simplify_stmt.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simplify_check import evaluate, i, ii, io, j, n, text, x, y

from ember.tir.arith import Analyzer, simplify
from ember.tir.expr import (
    Binary,
    Broadcast,
    Buffer,
    Cast,
    Const,
    Not,
    Ramp,
    Var,
    binary,
    cast,
    const,
    max_,
    min_,
    select,
)


@pytest.fixture
def ana():
    a = Analyzer()
    a.bind(io, 0, 31)
    a.bind(ii, 0, 31)
    a.bind(j, 0, 15)
    a.bind(x, 0, 3)
    return a


# -- constant folding ---------------------------------------------------------------------------


def test_fold_floor_semantics():
    assert simplify(const(-7) // const(2)).value == -4
    assert simplify(const(-7) % const(2)).value == 1
    assert simplify(const(7) % const(-2)).value == -1
    assert simplify(const(-1) // const(4)).value == -1


def test_fold_ops():
    assert simplify(min_(const(3), const(-2))).value == -2
    assert simplify(const(3) < const(4)).value is True
    assert simplify(const(3) < const(4)).dtype == "bool"
    assert simplify(binary("&&", const(True), const(False))).value is False
    assert simplify(~const(False)).value is True
    assert simplify(select(const(True), i, j)) is i
    assert text(simplify(i // const(0))) == "i // 0"  # left for the runtime


def test_bitwise_folds_and_bounds(ana):
    assert simplify(binary("&", const(-6), const(13))).value == -6 & 13
    assert simplify(binary("^", const(-6), const(13))).value == -6 ^ 13
    assert simplify(binary("|", Cast("int8", const(100)), Cast("int8", const(-128)))).value == -28
    assert ana.const_int_bound(binary("&", n, const(7))) == (0, 7)  # whatever n is
    assert ana.const_int_bound(binary("&", x, j)) == (0, 3)
    assert ana.const_int_bound(binary("|", j, const(16))) == (0, 31)
    assert ana.const_int_bound(binary("^", x, j)) == (0, 15)
    assert ana.const_int_bound(binary("^", n, const(1))) == (None, None)  # n may be negative


def test_fold_casts_and_narrow_ints():
    assert simplify(Cast("int8", const(200))).value == -56
    assert simplify(cast("int8", const(200))).value == -56  # expr.cast folds without wrapping
    assert simplify(Cast("uint8", const(-1))).value == 255
    assert simplify(Cast("int32", const(-2.7, "float32"))).value == -2
    assert simplify(Cast("float32", const(0.1, "float64"))).value == float.fromhex("0x1.99999ap-4")
    assert simplify(const(100, "int8") + const(100, "int8")).value == -56


def test_fold_float32_like_c():
    r = simplify(const(0.1, "float32") + const(0.2, "float32"))
    assert r.dtype == "float32" and r.value == float(np.float32(0.1) + np.float32(0.2)) != 0.1 + 0.2
    assert isinstance(simplify(const(1.0, "float32") / const(0.0, "float32")), Binary)


def test_math_calls_are_not_folded():
    from ember.tir.expr import call

    e = call("exp", const(1.0, "float32"))
    assert simplify(e) is e


# -- canonical linear form ------------------------------------------------------------------------


def test_cancellation(ana):
    assert simplify((io * 32 + ii + 33) - (io * 32 + ii) + 1).value == 34
    assert text(simplify(x * 4 - x * 2)) == "x * 2"
    assert text(simplify(2 * (i + j) - j)) == "i * 2 + j"
    assert text(simplify(i * 1 + 0)) == "i"
    assert simplify(i * 0).value == 0
    assert text(simplify(j + i * 4)) == "i * 4 + j"
    assert text(simplify(5 - i)) == "5 - i"
    assert text(simplify(i * j - j * i + n)) == "n"


def test_float_is_not_reassociated():
    a, b = Var("a", "float32"), Var("b", "float32")
    e = (a + b) - b
    assert simplify(e) is e
    assert simplify(a * 1.0) is a
    assert simplify(a - 0.0) is a
    z0 = a * 0.0
    assert simplify(z0) is z0  # a may be inf or nan


def test_unchanged_returns_same_object():
    e = i * 4 + j // 4
    assert simplify(e) is e
    assert simplify(i < n) is not None


# -- floor division and modulo --------------------------------------------------------------------


def test_split_patterns(ana):
    assert ana.simplify((io * 32 + ii) // 32) is io
    assert ana.simplify((io * 32 + ii) % 32) is ii
    assert text(ana.simplify((i * 16 + j) // 4)) == "i * 4 + j // 4"
    assert text(ana.simplify((i * 16 + j) % 4)) == "j % 4"
    assert text(ana.simplify((i // 4) // 8)) == "i // 32"
    assert text(ana.simplify((i * 6) // 4)) == "i * 3 // 2"
    assert text(ana.simplify((i * 8) // 4)) == "i * 2"
    assert ana.simplify((i * 8 + 4) % 4).value == 0
    assert text(ana.simplify((i // 32) * 32 + i % 32)) == "i"
    assert text(ana.simplify((i % 16) % 4)) == "i % 4"


def test_a_common_factor_leaves_the_divisor(ana):
    """(g y + r) // (g k) is (y + r // g) // k: a tile of 7 columns of a 112-wide row, its flat
    index f * 7 + 6, lies in row f // 16, as its first column does."""
    assert text(ana.simplify((i * 7 + 6) // 112)) == "i // 16"
    assert text(ana.simplify((i * 4 + 6) // 8)) == "(i + 1) // 2"
    for e in ((i * 7 + 6) // 112, (i * 4 + 6) // 8, (i * 6 - 1) // 4, (i * 4 - 5) // 12):
        got = ana.simplify(e)
        assert [evaluate(got, {i: v}) for v in range(-40, 300)] == [evaluate(e, {i: v}) for v in range(-40, 300)]


def test_mixed_radix_digits_merge():
    """An index unflattened and flattened again (a reshape between two layouts of the same bytes)
    is the flat index: the vectorizer then loads a contiguous vector, not a gather."""
    assert text(simplify((i // 128) * 128 + (i // 32) % 4 * 32 + i % 32)) == "i"
    assert text(simplify((i // 128) * 128 + (i % 128) // 32 * 32 + i % 32)) == "i"
    assert text(simplify((i // 32) % 4 * 32 + i % 32)) == "i % 128"
    assert text(simplify((i // 128) * 256 + (i // 32) % 4 * 64 + i % 32 * 2 + 3)) == "i * 2 + 3"
    assert text(simplify((i // 32) % 4 * 32 + i % 16)) == "i // 32 % 4 * 32 + i % 16"  # not digits of one radix
    assert text(simplify((i // 32) % 4 * 16 + i % 32)) == "i // 32 % 4 * 16 + i % 32"


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 4), st.integers(-3, 3), st.booleans(),
       st.lists(st.integers(-500, 500), min_size=4, max_size=4))
def test_mixed_radix_digits_keep_their_value(d, e, k, c, nested, xs):
    """c*(i % d) + c*d*(i // d % e) (or c*d*(i % (d*k) // d)), with i // (d*e) above, merged or not,
    keeps its value for negative i too (floor division)."""
    top = d * (e if not nested else k)
    digit = (i // d) % e if not nested else (i % top) // d
    expr = (i // top) * (c * top) + digit * (c * d) + (i % d) * c + 7
    s = simplify(expr)
    for v in xs:
        assert evaluate(s, {i: v}) == evaluate(expr, {i: v}), f"{expr} -> {s} at i = {v}"


def test_fuse_patterns():
    a = Analyzer()
    a.bind(x, 0, 9)
    a.bind(y, 0, 63)
    f = x * 64 + y
    assert a.simplify(f // 64) is x
    assert a.simplify(f % 64) is y
    # symbolic extent: y in [0, n)
    s = Analyzer()
    s.bind_range(n, 1, 1000)
    s.bind_range(y, 0, n)
    s.bind(x, 0, 100)
    assert s.simplify((x * n + y) // n) is x
    assert s.simplify((x * n + y) % n) is y
    assert s.can_prove(y < n)
    assert not s.can_prove(y < n - 1)
    assert s.const_int_bound(y) == (0, 999)
    fv = Var("f")
    assert s.simplify((fv // n) * n + fv % n) is fv


def test_negative_numerators_are_not_folded_wrongly(ana):
    # x in [0, 3]: x - 1 in [-1, 2], so (x - 1) // 4 is -1 or 0
    e = ana.simplify((x - 1) // 4)
    assert not isinstance(e, Const)
    assert [evaluate(e, {x: v}) for v in range(4)] == [-1, 0, 0, 0]
    assert ana.simplify((x - 4) // 4).value == -1
    assert text(ana.simplify((x - 4) % 4)) == "x"
    assert ana.simplify((x + 8) // 4).value == 2


# -- min, max, comparisons, logic -----------------------------------------------------------------


def test_min_max(ana):
    assert ana.simplify(min_(x, 100)) is x
    assert ana.simplify(max_(x, 100)).value == 100
    assert ana.simplify(min_(i, i)) is i
    assert text(ana.simplify(min_(i + 3, i + 5))) == "i + 3"
    assert text(ana.simplify(max_(i + 3, i + 5))) == "i + 5"


def test_comparisons(ana):
    assert ana.can_prove(io * 32 + ii < 1024)
    assert not ana.can_prove(io * 32 + ii < 1000)
    assert ana.simplify(io * 32 + ii >= 1024).value is False
    assert text(ana.simplify(i + 1 < 10)) == "i < 9"
    assert text(ana.simplify(binary("<", 10, i))) == "i > 10"
    assert text(ana.simplify(binary("<", 10, i + j))) == "i + j > 10"
    assert text(ana.simplify(io * 32 + ii < n)) == "io * 32 + ii < n"
    assert ana.simplify((i * 4 + 1).__eq__(i * 4 + 3).as_expr()).value is False
    assert ana.simplify(binary("==", i * 4, 2)).value is False  # i*4 is never 2
    assert ana.can_prove_equal(i * 4 + j - j, 4 * i)
    assert not ana.can_prove_equal(i, j)


def test_logic(ana):
    c = i < n
    assert ana.simplify(binary("&&", x < 10, c)) is c
    assert ana.simplify(binary("||", x < 10, c)).value is True
    assert ana.simplify(binary("&&", x > 10, c)).value is False
    assert text(ana.simplify(~(i < n))) == "i >= n"
    a = Var("a", "float32")
    lt = a < 1.0
    assert isinstance(ana.simplify(~lt), Not)  # not (a < 1) is not a >= 1 when a is nan
    assert ana.simplify(select(i < n, j, j)) is j


def test_const_int_bound(ana):
    assert ana.const_int_bound(io * 32 + ii) == (0, 1023)
    assert ana.const_int_bound(n) == (None, None)
    assert ana.const_int_bound(i % 8) == (0, 7)
    assert ana.const_int_bound(x % 8) == (0, 3)
    assert ana.const_int_bound(ii // 8 - 1) == (-1, 2)
    assert ana.const_int_bound(Buffer("B", (4,), "int8")[0]) == (-128, 127)
    assert ana.const_int_bound(Buffer("B", (4,), "bool")[0]) == (0, 1)


def test_scope_undoes_bindings():
    a = Analyzer()
    with a.scope():
        a.bind(i, 0, 3)
        assert a.can_prove(i < 4)
    assert not a.can_prove(i < 4)
    assert a.const_int_bound(i) == (None, None)


def test_bind_range_symbolic_min():
    a = Analyzer()
    a.bind(n, 0, 10)
    a.bind_range(i, n, 4)
    assert a.const_int_bound(i) == (0, 13)
    assert a.can_prove(i >= n)
    assert a.can_prove(i < n + 4)
    assert not a.can_prove(i < n + 3)


# -- vectors ----------------------------------------------------------------------------------------


def test_vectors():
    r = Ramp(i * 4, const(1), 4, "int64x4")
    b = Broadcast(j, 4, "int64x4")
    out = simplify(r + b)
    assert isinstance(out, Ramp) and text(out.base) == "i * 4 + j"
    out = simplify(r * Broadcast(const(2), 4, "int64x4"))
    assert isinstance(out, Ramp) and text(out) == "ramp(i * 8, 2, 4)"
    out = simplify(Broadcast(i, 4, "int64x4") + Broadcast(const(1), 4, "int64x4"))
    assert isinstance(out, Broadcast) and text(out.value) == "i + 1"
    c = Broadcast(const(3), 4, "int64x4")
    assert simplify(c) is c
    assert text(simplify(r // Broadcast(const(4), 4, "int64x4"))) == "broadcast(i, 4)"
    assert text(simplify(r % Broadcast(const(4), 4, "int64x4"))) == "ramp(0, 1, 4)"


def test_vector_lanes_in_one_block_of_a_multiple():
    """A ramp from a multiple of its lanes stays in one block of any multiple of them: the heads
    of a window split apart (MaxViT's (1, 64, 49, 64) into (128, 49, 32)) load whole vectors."""
    def b(v):
        return Broadcast(const(v), 4, "int64x4")

    r = Ramp(i * 4, const(1), 4, "int64x4")
    assert text(simplify(r // b(8))) == "broadcast(i // 2, 4)"
    assert text(simplify(r // b(12))) == "broadcast(i // 3, 4)"
    flat = r // b(12) * b(12) + r // b(8) % b(3) * b(16) + r % b(8)
    out = simplify(flat)
    assert isinstance(out, Ramp) and text(out.stride) == "1"
    for v in range(40):
        assert evaluate(out, {i: v}) == evaluate(flat, {i: v})
    assert isinstance(simplify(Ramp(i * 2, const(1), 4, "int64x4") // b(8)), Binary)  # may cross a block
    assert isinstance(simplify(Ramp(i * 4 + 1, const(1), 4, "int64x4") // b(8)), Binary)
