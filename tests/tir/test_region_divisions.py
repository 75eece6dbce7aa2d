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
