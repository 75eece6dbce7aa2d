"""s[C].tensorize in the stage API, and the library's AVX512-VNNI int8 dot (ember.intrinsics.vnni)
tensorizing an int8 GEMM: checked against NumPy's integer product on the interpreter and in C
(vpdpbusd where this CPU has avx512_vnni, its lane-by-lane fallback elsewhere)."""

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ScheduleError
from ember.intrinsics import cpu_has, vnni
from ember.testing import check_schedule, verify_trace_roundtrip

ADD4_C = r"""
static void add4(const float* a, const float* b, float* c, int64_t sa, int64_t sb) {
  for (int i = 0; i < 4; ++i) c[i] = a[i * sa] + b[i * sb];
}
"""


def declare_add4():
    a = te.placeholder((4,), "float32", name="a")
    b = te.placeholder((4,), "float32", name="b")
    c = te.compute((4,), lambda i: a[i] + b[i], name="c")

    def lower_fn(ins, outs):
        (pa, pb), (pc,) = ins, outs
        return te.call_extern("add4", pa.access_ptr("r"), pb.access_ptr("r"), pc.access_ptr("w"),
                              pa.strides[0], pb.strides[0])

    # any stride for a and b (their one dimension), unit stride for c
    return te.decl_tensor_intrinsic(c.op, lower_fn, name="add4", c_source=ADD4_C,
                                    strides={a: (None,), b: (None,)}, override=True)


ADD4 = declare_add4()


def test_stage_tensorize_of_an_elementwise_intrinsic():
    A = te.placeholder((6, 16), "float32", name="A")
    B = te.placeholder((16, 6), "float32", name="B")  # read transposed: stride 6
    C = te.compute((6, 16), lambda i, j: A[i, j] + B[j, i], name="C")
    s = te.create_schedule(C.op)
    _, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].tensorize(ji, ADD4)
    check_schedule(s, [A, B, C], lambda a, b: a + b.T, targets=("c", "python"), rtol=0, atol=0)
    verify_trace_roundtrip(s)


def test_stage_tensorize_names_what_differs():
    A = te.placeholder((6, 16), "float32", name="A")
    C = te.compute((6, 16), lambda i, j: A[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    _, ji = s[C].split(C.op.axis[1], factor=4)
    with pytest.raises(ScheduleError, match=r"onto add4: .* has op \* where the intrinsic.s a\[i\] \+ b\[i\] has \+"):
        s[C].tensorize(ji, "add4")


def int8_inputs(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    return a, b, a.astype(np.int64) @ b.astype(np.int64)


@pytest.mark.parametrize("target", ["python", "c"])
def test_vnni_int8_gemm(target):
    """C runs vpdpbusd where the CPU has avx512_vnni (this test says which it checked), the
    lane-by-lane sums elsewhere."""
    print(f"avx512_vnni on this CPU: {cpu_has(vnni.FEATURE)}")
    m, n, k = (4, 32, 8) if target == "python" else (48, 64, 256)
    s, args = vnni.gemm(m, n, k)
    assert "ember_vnni_dot16x4_update" in str(ember.lower(s, args))
    a, b, ref = int8_inputs(m, n, k)
    f = ember.build(s, args, target=target)
    if target == "c":  # the declaration's C, once in the unit however many calls
        assert f.source.count("static void ember_vnni_dot16x4_lanes(") == 1
        assert f.source.count("ember_vnni_dot16x4_update(") > 2
    c = np.zeros((m, n // 16, 16), np.int32)
    f(a, vnni.pack(b), c)
    np.testing.assert_array_equal(c.reshape(m, n), ref.astype(np.int32))
    verify_trace_roundtrip(s)


def test_vnni_lane_fallback():
    """The C a CPU without avx512_vnni runs: the runtime test forced false."""
    lanes = vnni.declare("dot_16x4_lanes_only", vnni.C_SOURCE.replace('__builtin_cpu_supports("avx512vnni")', "0"))
    m, n, k = 8, 32, 64
    s, args = vnni.gemm(m, n, k, intrin=lanes)
    a, b, ref = int8_inputs(m, n, k, seed=3)
    c = np.zeros((m, n // 16, 16), np.int32)
    ember.build(s, args, target="c")(a, vnni.pack(b), c)
    np.testing.assert_array_equal(c.reshape(m, n), ref.astype(np.int32))


def test_vnni_packing():
    b = np.arange(8 * 32, dtype=np.int64).reshape(8, 32).astype(np.int8)
    bp = vnni.pack(b)
    assert bp.shape == (2, 2, 16, 4)
    assert bp[1, 1, 3, 2] == b[1 * 4 + 2, 1 * 16 + 3]


def test_vnni_rejects_a_signed_activation():
    A = te.placeholder((4, 16), "int8", name="A")
    Bp = te.placeholder((1, 4, 16, 4), "int8", name="Bp")
    ko, ki = te.reduce_axis((0, 4), name="ko"), te.reduce_axis((0, 4), name="ki")
    C = te.compute((4, 1, 16), lambda i, jo, ji: te.sum(
        A[i, ko * 4 + ki].astype("int32") * Bp[jo, ko, ji, ki].astype("int32"), axis=[ko, ki]), name="C")
    s = te.create_schedule(C.op)
    i, jo, ji = s[C].op.axis
    s[C].reorder(i, jo, ko, ji, ki)
    with pytest.raises(ScheduleError, match="A is int8, the intrinsic's a is uint8"):
        s[C].tensorize(ji, vnni.INTRIN)
