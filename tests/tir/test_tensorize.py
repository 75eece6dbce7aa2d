"""sch.tensorize on the loop IR: a hand-written 4x4x4 matmul intrinsic (C routines) tensorizing
GEMM schedules, checked against NumPy on both targets (the interpreter running the intrinsic's
description); every mismatch between the nest and the description is a ScheduleError saying what
differs; traces replay."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.errors import ScheduleError
from ember.testing import check_schedule, verify_trace_roundtrip
from ember.tir import Schedule

TARGETS = ("c", "python")

MM4_C = r"""
static void mm4(const float* a, const float* b, float* c, int64_t sa, int64_t sb, int64_t sc) {
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      float acc = 0;
      for (int k = 0; k < 4; ++k) acc += a[i * sa + k] * b[k * sb + j];
      c[i * sc + j] = acc;
    }
}
static void mm4_reset(float* c, int64_t sc) {
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) c[i * sc + j] = 0;
}
static void mm4_update(const float* a, const float* b, float* c, int64_t sa, int64_t sb, int64_t sc) {
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      float acc = c[i * sc + j];
      for (int k = 0; k < 4; ++k) acc += a[i * sa + k] * b[k * sb + j];
      c[i * sc + j] = acc;
    }
}
"""


def declare_mm4(name="mm4", strides=None, roles=("body", "reset", "update"), c_source=MM4_C):
    a = te.placeholder((4, 4), "float32", name="a")
    b = te.placeholder((4, 4), "float32", name="b")
    k = te.reduce_axis((0, 4), name="k")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")

    def lower_fn(ins, outs):
        (pa, pb), (pc,) = ins, outs
        args = (pa.access_ptr("r"), pb.access_ptr("r"), pc.access_ptr("w"), pa.strides[0], pb.strides[0],
                pc.strides[0])
        calls = {"body": te.call_extern("mm4", *args),
                 "reset": te.call_extern("mm4_reset", pc.access_ptr("w"), pc.strides[0]),
                 "update": te.call_extern("mm4_update", *args)}
        return tuple(calls[r] if r in roles else None for r in ("body", "reset", "update"))

    given = None if strides is None else {t: strides[t.op.name] for t in (a, b, c) if t.op.name in strides}
    return te.decl_tensor_intrin(c.op, lower_fn, name=name, c_source=c_source, strides=given, override=True)


MM4 = declare_mm4()


def gemm(m=16, n=12, k=8, dtype="float32", transposed_b=False):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((n, k) if transposed_b else (k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    if transposed_b:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[j, r], axis=r), name="C")
    else:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def tiled(tensors, tile=(4, 4, 4), k_inside=False):
    """i, j, k split by `tile` and ordered i_0, j_0, k_0, i_1, j_1, k_1 (k_0 inside when asked)."""
    sch = Schedule(te.create_prim_func(tensors))
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, tile[0]])
    jo, ji = sch.split(j, factors=[None, tile[1]])
    ko, ki = sch.split(k, factors=[None, tile[2]])
    sch.reorder(io, jo, ko, ii, ji, ki)
    return sch, {"io": io, "jo": jo, "ko": ko, "ii": ii, "ji": ji, "ki": ki}


def mm_ref(a, b):
    return a @ b


def test_reduction_outside_is_reset_then_update():
    A, B, C = gemm()
    sch, ax = tiled([A, B, C])
    sch.tensorize(ax["ii"], "mm4")
    text = str(sch.mod)
    assert "routine.mm4_reset(" in text and "routine.mm4_update(" in text and "if k_0 * 4 == 0" in text
    check_schedule(sch, None, mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)


def test_reduction_inside_is_the_body():
    A, B, C = gemm(k=4)
    sch, ax = tiled([A, B, C])
    sch.tensorize(ax["ii"], "mm4")
    assert "routine.mm4(" in str(sch.mod) and "mm4_update" not in str(sch.mod)
    check_schedule(sch, None, mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)


def test_only_reset_and_update_when_the_reduction_is_inside():
    declare_mm4("mm4_ru", roles=("reset", "update"))
    A, B, C = gemm(k=4)
    sch, ax = tiled([A, B, C])
    sch.tensorize(ax["ii"], "mm4_ru")
    check_schedule(sch, None, mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)


def test_a_decomposed_reduction_is_the_update():
    A, B, C = gemm()
    sch, ax = tiled([A, B, C])
    sch.decompose_reduction(sch.get_block("C"), ax["ko"])
    sch.tensorize(ax["ii"], "mm4")
    text = str(sch.mod)
    assert "routine.mm4_update(" in text and "mm4_reset" not in text and "C_init" in text
    check_schedule(sch, None, mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)
    verify_trace_roundtrip(sch)


def test_a_decomposed_reduction_needs_an_update():
    declare_mm4("mm4_body", roles=("body",))
    A, B, C = gemm()
    sch, ax = tiled([A, B, C])
    sch.decompose_reduction(sch.get_block("C"), ax["ko"])
    with pytest.raises(ScheduleError, match="needs an update; it has body"):
        sch.tensorize(ax["ii"], "mm4_body")


def test_the_interpreter_runs_the_description():
    """An intrinsic whose C is wrong (it writes nothing) still interprets right: the python
    target runs the te compute it was declared by, not its C."""
    empty = "static void mm4(const float* a, const float* b, float* c, int64_t x, int64_t y, int64_t z) {}\n"
    declare_mm4("mm4_empty", roles=("body",), c_source=empty)
    A, B, C = gemm(k=4)
    sch, ax = tiled([A, B, C])
    sch.tensorize(ax["ii"], "mm4_empty")
    check_schedule(sch, None, mm_ref, targets=("python",), rtol=1e-5, atol=1e-5)


def test_trace_replays():
    A, B, C = gemm()
    sch, ax = tiled([A, B, C])
    sch.parallel(ax["io"])
    sch.tensorize(ax["ii"], "mm4")
    assert "sch.tensorize(" in sch.trace.as_python()
    verify_trace_roundtrip(sch)


def test_loops_under_a_tensorized_loop_are_consumed():
    A, B, C = gemm()
    sch, ax = tiled([A, B, C])
    sch.tensorize(ax["ii"], "mm4")
    with pytest.raises(ScheduleError, match="consumed by tensorize"):
        sch.vectorize(ax["ji"])


@settings(max_examples=6, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_gemm_sizes_property(mt, nt, kt, parallel):
    A, B, C = gemm(4 * mt, 4 * nt, 4 * kt)
    sch, ax = tiled([A, B, C])
    if parallel:
        sch.parallel(ax["io"])
    sch.tensorize(ax["ii"], "mm4")
    check_schedule(sch, None, mm_ref, targets=("python",), rtol=1e-5, atol=1e-5)


# -- mismatches ------------------------------------------------------------------------------------
def test_wrong_extent():
    A, B, C = gemm()
    sch, ax = tiled([A, B, C], tile=(4, 4, 8))
    with pytest.raises(ScheduleError, match=r"loop k_1 has extent 8, the intrinsic's loop k 4"):
        sch.tensorize(ax["ii"], "mm4")


def test_wrong_number_of_loops():
    A, B, C = gemm()
    sch, ax = tiled([A, B, C])
    with pytest.raises(ScheduleError, match="the nest under the loop has 2 loops, the intrinsic 3"):
        sch.tensorize(ax["ji"], "mm4")


def test_wrong_dtype():
    A, B, C = gemm(dtype="float64")
    sch, ax = tiled([A, B, C])
    with pytest.raises(ScheduleError, match="is float64, the intrinsic's .* is float32"):
        sch.tensorize(ax["ii"], "mm4")


def test_wrong_stride():
    declare_mm4("mm4_packed", strides={"a": (4, 1), "b": (None, 1), "c": (None, 1)})
    A, B, C = gemm()  # A is (16, 8): its rows are 8 apart
    sch, ax = tiled([A, B, C])
    with pytest.raises(ScheduleError, match="A has stride 8 in dimension 0, the intrinsic's a takes stride 4"):
        sch.tensorize(ax["ii"], "mm4_packed")


def test_a_transposed_read_is_a_stride():
    A, B, C = gemm(transposed_b=True)  # B[j, k]: the intrinsic's b[k, j] walks j with stride 8
    sch, ax = tiled([A, B, C])
    with pytest.raises(ScheduleError, match="B has stride 8 in dimension 0, the intrinsic's b takes stride 1"):
        sch.tensorize(ax["ii"], "mm4")


def test_wrong_access_pattern():
    A = te.placeholder((16, 16), "float32", name="A")
    B = te.placeholder((8, 12), "float32", name="B")
    r = te.reduce_axis((0, 8), name="k")
    C = te.compute((16, 12), lambda i, j: te.sum(A[i, 2 * r] * B[r, j], axis=r), name="C")
    sch, ax = tiled([A, B, C])
    with pytest.raises(ScheduleError, match=r"the access A\[.*\] does not follow the intrinsic's a\[i, k\]"):
        sch.tensorize(ax["ii"], "mm4")


def test_spatial_axis_where_the_intrinsic_reduces():
    X = te.placeholder((4, 4, 4), "float32", name="X")
    Y = te.compute((4, 4, 4), lambda i, j, l: X[i, j, l] * 2.0, name="C")
    sch = Schedule(te.create_prim_func([X, Y]))
    i, _, _ = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="l is a spatial axis where the intrinsic's k is a reduce axis"):
        sch.tensorize(i, "mm4")


def test_a_body_alone_cannot_take_a_reduction_outside():
    declare_mm4("mm4_body", roles=("body",))
    A, B, C = gemm()
    sch, ax = tiled([A, B, C])
    with pytest.raises(ScheduleError, match="needs a reset and an update; it has only a body"):
        sch.tensorize(ax["ii"], "mm4_body")


def test_a_split_that_does_not_divide():
    A, B, C = gemm(m=14)
    sch, ax = tiled([A, B, C])
    with pytest.raises(ScheduleError, match="predicate"):
        sch.tensorize(ax["ii"], "mm4")


def test_unknown_intrinsic():
    A, B, C = gemm()
    sch, ax = tiled([A, B, C])
    with pytest.raises(ScheduleError, match="no tensor intrinsic named 'nope'"):
        sch.tensorize(ax["ii"], "nope")


def test_call_extern_argument_order():
    a = te.placeholder((4,), "float32", name="a")
    c = te.compute((4,), lambda i: a[i] + 1.0, name="c")
    with pytest.raises(ScheduleError, match="the pointers read, then those written, then the scalars; got wr"):
        te.decl_tensor_intrin(c.op, lambda ins, outs: te.call_extern("f", outs[0].access_ptr("w"),
                                                                     ins[0].access_ptr("r")), name="bad_order")


def test_reset_needs_a_sum():
    a = te.placeholder((4,), "float32", name="a")
    k = te.reduce_axis((0, 4), name="k")
    c = te.compute((1,), lambda i: te.max(a[k], axis=k), name="c")

    def lower_fn(ins, outs):
        call = te.call_extern("f", ins[0].access_ptr("r"), outs[0].access_ptr("w"))
        return None, te.call_extern("r", outs[0].access_ptr("w")), call

    with pytest.raises(ScheduleError, match="must be a sum reduction"):
        te.decl_tensor_intrin(c.op, lower_fn, name="max4")


def test_a_name_is_declared_once():
    with pytest.raises(ScheduleError, match="already declared"):
        a = te.placeholder((4,), "float32", name="a")
        c = te.compute((4,), lambda i: a[i] + 1.0, name="c")
        te.decl_tensor_intrin(c.op, lambda ins, outs: te.call_extern("f", ins[0].access_ptr("r"),
                                                                     outs[0].access_ptr("w")), name="mm4")


def test_random_inputs_are_not_trivial():
    """The check runs on fresh random data: a zero result from the C calls would fail it."""
    A, B, C = gemm()
    sch, ax = tiled([A, B, C])
    sch.tensorize(ax["ii"], "mm4")
    f = ember.build(sch, target="c")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 8), dtype=np.float32), rng.standard_normal((8, 12), dtype=np.float32)
    out = np.full((16, 12), np.nan, np.float32)
    f(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    assert np.abs(out).max() > 0.1
