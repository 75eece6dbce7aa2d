"""The simulated accelerators (ember.accel): the teaching material's GEMM program on vdla (its
lowered instructions, the simulator and the interpreter against NumPy), VTA's int8 core bit-exact
against integer NumPy, the errors of what the device cannot do, and the simulator's report."""

import json
from dataclasses import astuple

import numpy as np
import pytest

import ember
from ember import te as t
from ember.accel import vdla, vta
from ember.accel.conv import Conv2d, conv2d, padded_gemm, reference, weight_matrix
from ember.accel.schedules import Tiles, gemm, gemm_tensors
from ember.accel.tune import gemm_space, operands, tune_gemm
from ember.errors import ScheduleError


def _operands(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    return a, b, np.full((n, n), np.nan, np.float32)


@pytest.fixture
def seed_program(load_example):
    """examples/kernels/vdla.py's program (the teaching material's, as written)."""
    return load_example("vdla").seed_program


@pytest.fixture
def seed64(seed_program):
    s, args = seed_program(64)
    return s, args, ember.build(s, args, target=vdla)


def test_seed_program_prints_as_the_instructions(seed64):
    s, args, _ = seed64
    text = str(ember.lower(s, args, target=vdla))
    lines = [ln.strip() for ln in text.splitlines()]
    calls = [ln.split("(")[0] for ln in lines if ln.startswith(("routine.", "for "))]
    assert calls == ["for ax0_0 in range", "for ax1_0 in range", "routine.fill_zero", "for k_0 in range",
                     "routine.dma_copy2d", "routine.dma_copy2d", "routine.fuse_gemm8x8_add", "routine.dma_copy2d"]
    assert "op='load', memory='inp'" in text and "op='load', memory='wgt'" in text and "op='store'" in text


def test_seed_program_on_the_simulator(seed64):
    *_, f = seed64
    a, b, c = _operands(64)
    f(a, b, c)
    np.testing.assert_allclose(c, a.T @ b, rtol=1e-5, atol=1e-4)


def test_seed_program_on_the_interpreter(seed_program):
    s, args = seed_program(16)
    f = ember.build(s, args, target="python")
    a, b, c = _operands(16, seed=1)
    f(a, b, c)
    np.testing.assert_allclose(c, a.T @ b, rtol=1e-5, atol=1e-5)


def test_seed_program_1024(seed_program):
    s, args = seed_program(1024)
    f = ember.build(s, args, target=vdla)
    a, b, c = _operands(1024, seed=2)
    f(a, b, c)
    np.testing.assert_allclose(c, a.T @ b, rtol=1e-4, atol=1e-3)
    r = f.report()
    assert r.stats["n_gemm"] == 128 ** 3 and r.stats["macs"] == 1024 ** 3


def test_report(seed64, tmp_path):
    *_, f = seed64
    f(*_operands(64, seed=3))
    r = f.report()
    tiles = 8 ** 3  # (64 / 8) ** 3 GEMM steps of 8 x 8 x 8
    assert r.stats["n_gemm"] == tiles and r.stats["n_load"] == 2 * tiles and r.stats["n_store"] == 64
    assert r.dma_bytes == {"vdla.inp": tiles * 256, "vdla.wgt": tiles * 256, "vdla.acc": 0, "stored": 64 * 256}
    assert r.utilization == pytest.approx(64 ** 3 / (512 * r.cycles))
    assert r.cycles >= max(r.stats["busy_load"], r.stats["busy_compute"], r.stats["busy_store"])
    assert "GEMM core" in str(r)
    doc = r.chrome_trace(tmp_path / "trace.json")
    assert json.loads((tmp_path / "trace.json").read_text()) == doc
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == r.stats["instructions"]
    # each GEMM starts after the loads it reads ended: the load->compute tokens
    loads_end = 0
    for _, op, start, end, _, _ in r.trace.tolist():
        if op == 0:  # LOAD
            loads_end = end
        elif op == 1:  # GEMM
            assert start >= loads_end


def test_vta_int8_gemm_is_bit_exact():
    m, n, k = 64, 64, 64
    s, args = gemm(vta, m, n, k, Tiles(32, 64, 64))
    f = ember.build(s, args, target=vta)
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    c = np.zeros((m, n), np.int32)
    f(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32).T)


def test_three_axis_tile():
    A = t.placeholder((32, 48), name="A")
    B = t.placeholder((48, 16), name="B")
    r = t.reduce_axis((0, 48), name="r")
    C = t.compute((32, 16), lambda i, j: t.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = t.create_schedule(C.op)
    i, j = s[C].op.axis
    loops = s[C].tile(i, j, r, 8, 8, 16)
    assert len(loops) == 6
    f = ember.build(s, [A, B, C], target="python")
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((32, 48), dtype=np.float32), rng.standard_normal((48, 16), dtype=np.float32)
    c = np.zeros((32, 16), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_a_tile_larger_than_its_buffer():
    A = t.placeholder((1024, 64), name="A")
    B = t.placeholder((1024, 64), name="B")
    k = t.reduce_axis((0, 1024), name="k")
    C = t.compute((64, 64), lambda y, x: t.sum(A[k, y] * B[k, x], axis=k), name="C")
    s = t.create_schedule(C.op)
    CL = s.cache_write(C, vdla.acc_buffer)
    AL = s.cache_read(A, vdla.inp_buffer, [CL])
    BL = s.cache_read(B, vdla.wgt_buffer, [CL])
    y, x = s[C].op.axis
    yo, xo, yi, xi = s[C].tile(y, x, 8, 8)
    s[CL].compute_at(s[C], xo)
    s[AL].compute_at(s[CL], s[CL].op.axis[0])  # all of k at once: 1024 x 8 floats
    s[BL].compute_at(s[CL], s[CL].op.axis[0])
    message = r"vdla\.(inp|wgt) holds 16384 bytes; the tiles staged in it need 32768: [AB]_vdla\.\w+ \(1024x8 float32"
    with pytest.raises(ScheduleError, match=message):
        ember.lower(s, [A, B, C], target=vdla)


def test_an_intrinsic_that_does_not_match_the_nest():
    A = t.placeholder((64, 64), name="A")
    B = t.placeholder((64, 64), name="B")
    k = t.reduce_axis((0, 64), name="k")
    C = t.compute((64, 64), lambda y, x: t.sum(A[y, k] * B[k, x], axis=k), name="C")  # A not k-major
    s = t.create_schedule(C.op)
    CL = s.cache_write(C, vdla.acc_buffer)
    s.cache_read(A, vdla.inp_buffer, [CL])
    s.cache_read(B, vdla.wgt_buffer, [CL])
    y, x = s[C].op.axis
    yo, xo, yi, xi = s[C].tile(y, x, 8, 8)
    s[CL].compute_at(s[C], xo)
    yc, xc = s[CL].op.axis
    (kc,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kc, factor=8)
    s[CL].reorder(ko, yc, xc, ki)
    with pytest.raises(ScheduleError, match="gemm8x8"):
        s[CL].tensorize(yc, vdla.gemm8x8)


def test_a_dma_of_a_region_that_is_not_2d():
    A = t.placeholder((4, 8, 8), name="A")
    C = t.compute((4, 4, 4), lambda b, i, j: A[b, i, j] * 2.0, name="C")
    s = t.create_schedule(C.op)
    AL = s.cache_read(A, vdla.inp_buffer, [C])
    bo, _ = s[C].split(s[C].op.axis[0], factor=2)
    s[AL].compute_at(s[C], bo)  # A[2 bo : 2 bo + 2, 0:4, 0:4]: 2 x 4 rows of 4
    with pytest.raises(ScheduleError, match=r"not a 2-D DMA: vdla walks rows of consecutive elements"):
        ember.lower(s, [A, C], target=vdla)


def test_the_host_cannot_read_device_memory():
    A = t.placeholder((8, 8), name="A")
    C = t.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="C")
    s = t.create_schedule(C.op)
    s.cache_read(A, vdla.inp_buffer, [C])
    with pytest.raises(ember.errors.LowerError, match="the host reads A_vdla.inp in vdla.inp"):
        ember.lower(s, [A, C], target=vdla)


def test_the_cpu_does_not_build_a_device_schedule(seed_program):
    s, args = seed_program(16)
    with pytest.raises(ember.errors.LowerError, match=r"staged in vdla\.\w+, an accelerator's memory"):
        ember.build(s, args, target="c")


def test_vdla_is_a_target():
    assert vdla.target.kind == "accel" and vdla.target.accel is vdla
    assert vdla.gemm8x8.name == "gemm8x8" and vta.gemm16.name == "gemm16"
    assert vdla.inp_buffer.scope == "vdla.inp" and vdla.acc_buffer.bytes == 16 << 10


def _epilogue_schedule(m: int, n: int, k: int, epilogue):
    """vta's GEMM plus an epilogue on the accumulator tile (the ALU), 16 x 16 output tiles."""
    A, B, C = gemm_tensors(vta, m, n, k)
    bias = t.placeholder((m, n), "int32", name="bias")
    D = t.compute((m, n), lambda i, j: epilogue(C[i, j], bias[i, j]), name="D")
    s = t.create_schedule(D.op)
    CL = s.cache_write(C, vta.acc_buffer)
    s[C].compute_inline()
    DL = s.cache_write(D, vta.acc_buffer)
    biasL = s.cache_read(bias, vta.acc_buffer, [DL])
    AL = s.cache_read(A, vta.inp_buffer, [CL])
    BL = s.cache_read(B, vta.wgt_buffer, [CL])
    y, x = s[D].op.axis
    yo, xo, yi, xi = s[D].tile(y, x, 16, 16)
    for stage in (DL, biasL, CL):
        s[stage].compute_at(s[D], xo)
    yc, xc = s[CL].op.axis
    (kc,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kc, factor=16)
    s[CL].reorder(ko, yc, xc, ki)
    s[AL].compute_at(s[CL], ko)
    s[BL].compute_at(s[CL], ko)
    s[CL].tensorize(yc, vta.gemm16)
    return s, [A, B, bias, D]


def test_vta_alu_epilogue_is_bit_exact():
    """bias, requantize (// 16: an arithmetic shift), clip to int8's range: one ALU step each."""
    m, n, k = 32, 32, 32
    s, args = _epilogue_schedule(m, n, k, lambda c, b: t.min(t.max((c + b) // 16, -128), 127))
    text = str(ember.lower(s, args, target=vta))
    assert [op for op in ("add", "shr", "max", "min") if f"alu='{op}'" in text] == ["add", "shr", "max", "min"]
    f = ember.build(s, args, target=vta)
    rng = np.random.default_rng(6)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    bias = rng.integers(-5000, 5000, (m, n), dtype=np.int32)
    d = np.zeros((m, n), np.int32)
    f(a, b, bias, d)
    np.testing.assert_array_equal(d, np.clip((a.astype(np.int32) @ b.astype(np.int32).T + bias) // 16, -128, 127))
    r = f.report()
    assert r.stats["n_alu"] == 4 * 4 and r.dma_bytes["vta.acc"] == m * n * 4 == r.dma_bytes["stored"]


def test_the_alu_refuses_what_it_cannot_do():
    s, args = _epilogue_schedule(16, 16, 16, lambda c, b: (c + b) // 3)
    with pytest.raises(ScheduleError, match=r"ALU computes add, max, min, mul, shr .*not such a step"):
        ember.lower(s, args, target=vta)


def test_double_buffering_overlaps_loads_with_gemms():
    m = n = k = 64
    a, b, ref = operands(vta, m, n, k, seed=7)
    cycles = {}
    for buffering in ("single", "inputs"):
        s, args = gemm(vta, m, n, k, Tiles(32, 32, 16), buffering)
        if buffering == "inputs":
            assert "alloc((2, 32, 16), 'int8', scope='vta.inp')" in str(ember.lower(s, args, target=vta))
        f = ember.build(s, args, target=vta)
        c = np.zeros((m, n), np.int32)
        f(a, b, c)
        np.testing.assert_array_equal(c, ref)
        cycles[buffering] = f.report().cycles
    assert cycles["inputs"] < cycles["single"]


def test_tuning_measures_candidates_by_the_simulators_cycles():
    space = gemm_space(vta, 32, 32, 32)
    assert all(ty * tk * (1 if b == "single" else 2) <= vta.inp_buffer.elements for (ty, tx, tk), b in
               ((astuple(t_), b) for t_, b in space))
    assert {b for _, b in space} == {"single", "inputs", "tiles"}
    result = tune_gemm(vta, 32, 32, 32, trials=1, seed=1)
    assert result.default.tiles == Tiles(16, 16, 16) and result.default.buffering == "single"
    assert result.best.cycles == min(t_.cycles for t_ in result.trials) <= result.default.cycles
    assert "fewer cycles" in str(result)


def test_int8_conv_as_im2col_gemm_is_bit_exact():
    conv, relu, shift = Conv2d(1, 8, 5, 5, 16, 3, 3, 1, 1), True, 10  # 32 (25 padded) rows, 80 (72) columns
    s, args = conv2d(vta, conv, shift, relu=relu)
    f = ember.build(s, args, target=vta)
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (conv.n, conv.h, conv.w, conv.c), dtype=np.int8)
    w = rng.integers(-128, 128, (conv.k, conv.r, conv.s, conv.c), dtype=np.int8)
    bias = rng.integers(-4096, 4096, conv.k, dtype=np.int32)
    m, n, _ = padded_gemm(vta, conv)
    y = np.full((m, n), 99, np.int8)
    f(x, weight_matrix(vta, conv, w), bias, y)  # int8 out: the store narrows the accumulator
    ref = reference(x, w, bias, conv, shift, relu)
    assert np.mean((ref > (0 if relu else -128)) & (ref < 127)) > 0  # not all clipped
    np.testing.assert_array_equal(y[:len(ref)], ref)
    r = f.report()
    assert r.stats["macs"] == m * n * padded_gemm(vta, conv)[2] and r.dma_bytes["stored"] == m * n
    y_interpreted = np.full((m, n), 99, np.int8)  # the same schedule without the simulator
    ember.build(s, args, target="python")(x, weight_matrix(vta, conv, w), bias, y_interpreted)
    np.testing.assert_array_equal(y_interpreted, y)
