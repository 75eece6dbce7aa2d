"""compute_at, reverse_compute_at and compute_root rebuild a block's loops: the block's predicate
(the tail guard of a non-dividing split) must survive onto the new loops, or be proven redundant
by them. Checked against NumPy on both targets, with sizes and split factors drawn at random."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember import te
from ember.errors import ScheduleError
from ember.target import Target
from ember.testing import check_schedule
from ember.tir import Schedule
from ember.tir.expr import const, is_const
from ember.tir.stmt import IterVar, Range

TARGETS = ("c", "python")


def chain(n):
    """B = 2 X, C = B + 1 over n points (n an int or a symbolic size)."""
    X = te.placeholder((n,), name="X")
    B = te.compute((n,), lambda i: X[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    return X, C


def ref(x):
    return x * 2 + 1


def widen(sch: Schedule, name: str, extent: int) -> None:
    """Give block `name`'s iteration variable the domain [0, extent), wider than its buffers, so
    only its predicate keeps it in bounds (as the partial axis of an rfactor once was)."""
    realize = sch.get_realize(sch.get_block(name))
    iv = realize.block.iter_vars[0]
    block = replace(realize.block, iter_vars=(IterVar(iv.var, Range(iv.dom.min, const(extent)), iv.kind),))
    sch.replace(realize, replace(realize, block=block))


def split_block(sch: Schedule, name: str, factor: int):
    (loop,) = sch.get_loops(sch.get_block(name))
    return sch.split(loop, [None, factor])


@settings(max_examples=6, deadline=None)
@given(n=st.integers(5, 13), factor=st.integers(2, 6), where=st.sampled_from(["compute_at", "reverse_compute_at"]))
def test_split_tail_under_a_moved_block(n, factor, where):
    X, C = chain(n)
    sch = Schedule(te.create_prim_func([X, C]))
    if where == "compute_at":
        outer, _ = split_block(sch, "C", factor)
        split_block(sch, "B", factor + 1)
        sch.compute_at(sch.get_block("B"), outer)
    else:
        outer, _ = split_block(sch, "B", factor)
        split_block(sch, "C", factor + 1)
        sch.reverse_compute_at(sch.get_block("C"), outer)
    check_schedule(sch, None, ref, targets=TARGETS)


@pytest.mark.parametrize("where", ["compute_at", "reverse_compute_at"])
def test_symbolic_split_tail_under_a_moved_block(where):
    n = te.var("n")
    X, C = chain(n)
    sch = Schedule(te.create_prim_func([X, C]))
    moved, anchor = ("B", "C") if where == "compute_at" else ("C", "B")
    outer, _ = split_block(sch, anchor, 4)
    split_block(sch, moved, 3)
    getattr(sch, where)(sch.get_block(moved), outer)
    for size in (1, 7, 12):
        check_schedule(sch, None, ref, sizes={n: size}, targets=TARGETS)


@pytest.mark.parametrize("where", ["compute_at", "reverse_compute_at", "compute_root"])
def test_a_predicate_the_domain_does_not_imply_is_kept(where):
    X, C = chain(10)
    sch = Schedule(te.create_prim_func([X, C]))
    moved, anchor = ("B", "C") if where != "reverse_compute_at" else ("C", "B")
    outer, _ = split_block(sch, anchor, 4)
    split_block(sch, moved, 4)
    widen(sch, moved, 12)
    if where == "compute_root":
        sch.compute_root(sch.get_block(moved))
    else:
        getattr(sch, where)(sch.get_block(moved), outer)
    assert not is_const(sch.get_realize(sch.get_block(moved)).predicate, True)
    check_schedule(sch, None, ref, targets=TARGETS, trace=False)  # widen is no directive


def test_a_predicate_the_domain_implies_is_dropped():
    X, C = chain(10)
    sch = Schedule(te.create_prim_func([X, C]))
    split_block(sch, "B", 4)
    sch.compute_root(sch.get_block("B"))
    assert is_const(sch.get_realize(sch.get_block("B")).predicate, True)
    check_schedule(sch, None, ref, targets=TARGETS)


def test_a_guard_of_which_loop_visits_a_point_is_dropped_only_where_accesses_stay_in_bounds():
    X, C = chain(10)
    sch = Schedule(te.create_prim_func([X, C]))
    _, inner = split_block(sch, "B", 4)
    sch.split(inner, [None, 3])  # i_1 < 4: which iteration visits a point, not which points
    outer, _ = split_block(sch, "C", 5)
    sch.compute_at(sch.get_block("B"), outer)
    check_schedule(sch, None, ref, targets=TARGETS)

    sch = Schedule(te.create_prim_func([X, C]))
    _, inner = split_block(sch, "B", 4)
    sch.split(inner, [None, 3])
    widen(sch, "B", 12)
    with pytest.raises(ScheduleError, match="not in bounds over its whole domain"):
        sch.compute_root(sch.get_block("B"))


def test_gpu_bound_consumer_keeps_the_producers_guard():
    X, C = chain(10)
    sch = Schedule(te.create_prim_func([X, C]))
    outer, inner = split_block(sch, "C", 4)
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")
    split_block(sch, "B", 4)
    widen(sch, "B", 12)
    sch.compute_at(sch.get_block("B"), inner)
    check_schedule(sch, None, ref, targets=(Target("python", schedules="gpu"),), trace=False)
