"""The statement simplifier (ember.tir.transform.simplify_stmt): guards proved true or false,
loops of one or no iteration, empty statements dropped, blocks' bindings simplified."""

from __future__ import annotations

from simplify_check import i, ii, io, n, text

from ember.tir.expr import Buffer, Var, binary, const
from ember.tir.stmt import (
    Block,
    BlockRealize,
    BufferStore,
    For,
    IfThenElse,
    IterVar,
    Range,
    SeqStmt,
    seq,
)
from ember.tir.transform.simplify_stmt import simplify_stmt

A = Buffer("A", (1024,), "float32")


def store(idx, val=1.0):
    return BufferStore(A, const(val, "float32"), (idx,))


def test_guard_removal():
    body = IfThenElse(io * 32 + ii < 1024, store(io * 32 + ii))
    loop = For(io, const(0), const(32), "serial", For(ii, const(0), const(32), "serial", body))
    out = simplify_stmt(loop)
    assert isinstance(out.body.body, BufferStore)
    # a guard that can fail stays
    body = IfThenElse(io * 32 + ii < 1000, store(io * 32 + ii))
    loop = For(io, const(0), const(32), "serial", For(ii, const(0), const(32), "serial", body))
    assert simplify_stmt(loop) is loop
    # provably false: the else branch, or nothing
    never = IfThenElse(io > 40, store(io), store(io + 1))
    out = simplify_stmt(For(io, const(0), const(32), "serial", never))
    assert text(out.body) == "A[io + 1] = 1.0"
    assert simplify_stmt(For(io, const(0), const(32), "serial", IfThenElse(io > 40, store(io)))).stmts == ()


def test_nested_guard_uses_outer_condition():
    inner = IfThenElse(i < 20, store(i))
    out = simplify_stmt(For(i, const(0), n, "serial", IfThenElse(i < 10, inner)))
    assert text(out) == "for i in range(n):\n    if i < 10:\n        A[i] = 1.0"


def test_extent_one_loops():
    inner = For(ii, const(0), const(1), "serial", store(io * 4 + ii))
    out = simplify_stmt(For(io, const(0), const(8), "serial", inner))
    assert text(out) == "for io in range(8):\n    A[io * 4] = 1.0"
    par = For(ii, const(0), const(1), "parallel", store(ii))
    assert simplify_stmt(par) is par
    ann = For(ii, const(0), const(1), "serial", store(ii), (("pragma", 1),))
    assert simplify_stmt(ann) is ann
    empty = For(ii, const(0), n - n, "serial", store(ii))
    assert simplify_stmt(empty).stmts == ()


def test_seq_drops_empty_children():
    dead = For(ii, const(0), const(0), "serial", store(ii))
    s = seq(store(const(0)), dead, store(const(1)))
    out = simplify_stmt(s)
    assert isinstance(out, SeqStmt) and len(out.stmts) == 2
    assert simplify_stmt(SeqStmt((dead,))).stmts == ()


def test_blocks():
    vi = Var("vi")
    blk = Block("B", (IterVar(vi, Range(const(0), const(64))),), (), (),
                IfThenElse(vi < 64, store((vi // 64) * 8 + vi)))
    real = BlockRealize((io * 32 + ii + 0,), binary("&&", const(True), io < n), blk)
    out = simplify_stmt(For(io, const(0), const(2), "serial", For(ii, const(0), const(32), "serial", real)))
    r = out.body.body
    assert text(r.iter_values[0]) == "io * 32 + ii"
    assert text(r.predicate) == "io < n"
    assert text(r.block.body) == "A[vi] = 1.0"
    unchanged = For(io, const(0), const(2), "serial", BlockRealize((io,), const(True), Block(
        "C", (IterVar(vi, Range(const(0), const(2))),), (), (), store(vi))))
    assert simplify_stmt(unchanged) is unchanged
