"""Region analysis (ember.tir.region.merge_indices) of an index that splits a row and puts it back
together, (x // d) * d + x % d: the row itself, exactly, for a symbolic d too (an epilogue that reads
a gemm's rows as a batch of sequences, computed over the gemm's tile). Other divisions are bounded
by the interval rules as before."""

from ember.tir.arith import Analyzer
from ember.tir.expr import Var, const
from ember.tir.region import Interval, merge_indices


def _bounds(index, dom):
    ana = Analyzer()
    (iv,) = merge_indices([(index,)], dom, ana)
    return str(iv.lo), str(iv.hi)


def test_a_split_row_put_back_together_is_the_row():
    io, ii, seq = Var("io"), Var("ii"), Var("seq")
    x = io * 8 + ii
    dom = {ii: Interval(const(0), const(7))}
    for d in (seq, const(16)):
        assert _bounds((x // d) * d + x % d, dom) == ("io * 8", "io * 8 + 7")


def test_other_divisions_keep_the_interval_rules():
    io, ii = Var("io"), Var("ii")
    dom = {ii: Interval(const(0), const(7))}
    assert _bounds((io * 8 + ii) // 4, dom) == ("io * 2", "io * 2 + 1")


def test_a_remainder_within_one_quotient_is_shifted():
    """x % d over an interval that one value of x // d covers is x - d * (x // d), shifted: a tile of
    7 columns of a flat row index r (f * 7 .. f * 7 + 6 of rows 112 wide) reads columns
    f * 7 % 112 .. + 6 of one image row, where a wrapping interval takes the whole row."""
    f, ii = Var("f"), Var("ii")
    dom = {ii: Interval(const(0), const(6))}
    assert _bounds((f * 7 + ii) % 112, dom) == ("f * 7 % 112", "f * 7 % 112 + 6")
    assert _bounds((f * 7 + ii) // 112 % 112, dom) == ("f // 16 % 112", "f // 16 % 112")
    assert _bounds((f * 5 + ii) % 112, dom) == ("0", "111")  # (5 does not divide 112: a tile may wrap)
