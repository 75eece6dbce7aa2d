"""The tile intrinsics of the CPU's bf16 and int8 units (ember.intrinsics.tiles): AVX512-BF16's
vdpbf16ps, AVX512-VNNI's vpdpbusd and AMX's tdpbf16ps / tdpbusd / tdpbssd tensorizing a GEMM, checked against NumPy
(bf16-rounded inputs summed in fp32; exact integer sums) on the interpreter everywhere and in C
where this CPU has the unit; AMX compiled for a Sapphire Rapids target, and run here through
the fallback its kernels take where Linux refuses the tile state."""

import platform
import shutil
import subprocess

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ConfigError, ScheduleError
from ember.intrinsics import amx, avx512, cpu_has, tiles
from ember.runtime.build import build_library
from ember.runtime.module import build_c_module
from ember.target import Target
from ember.testing import verify_trace_roundtrip
from ember.tir import dtype as dt

BF16 = dt.to_numpy("bfloat16")


def operands(unit, m, n, k, seed=0):
    """A (M, K / G, G), Bp packed, the reference C (M, N) and its tolerance."""
    rng = np.random.default_rng(seed)
    if unit.acc_dtype == "float32":
        a = rng.standard_normal((m, k)).astype(BF16)
        b = rng.standard_normal((k, n)).astype(BF16)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        atol = 1e-5 * np.sqrt(k)  # fp32 sums of k exact products of about 1
    else:
        a = rng.integers(0 if unit.a_dtype == "uint8" else -128, 128, (m, k)).astype(unit.a_dtype)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        ref, atol = a.astype(np.int64) @ b.astype(np.int64), 0
    return a.reshape(m, k // unit.group, unit.group), tiles.pack(b, unit.group), ref, atol


def run(f, unit, m, n, a, bp):
    c = np.zeros((m, n // tiles.LANES, tiles.LANES), unit.acc_dtype)
    f(a, bp, c)
    return c.reshape(m, n)


@pytest.mark.parametrize("target", ["python", "c"])
@pytest.mark.parametrize("kind", ["bf16", "u8s8"])
def test_avx512_tile_gemm(kind, target):
    unit = avx512.UNITS[kind]
    flag = {"bf16": "avx512_bf16", "u8s8": "avx512_vnni"}[kind]
    if target == "c" and not cpu_has(flag):
        pytest.skip(f"this CPU has no {flag} (/proc/cpuinfo)")
    m, n, k = (8, 32, 8) if target == "python" else (40, 80, 320)  # 8 x 1 tiles (80: 5 blocks of 16)
    s, args = tiles.gemm(unit, m, n, k)
    a, bp, ref, atol = operands(unit, m, n, k)
    f = ember.build(s, args, target=target)
    np.testing.assert_allclose(run(f, unit, m, n, a, bp), ref, rtol=1e-5, atol=atol)
    if target == "c":  # one tile function of 8 x 1 accumulators
        assert f.source.count("_mm512_dpbf16_ps(" if kind == "bf16" else "ember_dpbusd(c") == 8
    verify_trace_roundtrip(s)


@pytest.mark.skipif(not cpu_has("avx512_vnni"), reason="this CPU has no avx512_vnni (/proc/cpuinfo)")
@pytest.mark.parametrize("m, n, k", [(40, 64, 1028), (12, 64, 36), (7, 48, 20)], ids=["8x2", "4x4", "1x1"])
def test_vnni_tiles_are_exact(m, n, k):
    """vpdpbusd's register tiles (16 accumulators, and one; K an odd number of groups) against
    NumPy's int32 sums, bit for bit, on random bytes with a row of 255s and a column of -128s
    (each operand's extreme, whose products of 4 a 16-bit step would saturate)."""
    rng = np.random.default_rng()
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    a[1], w[:, 3] = 255, -128
    s, args = tiles.gemm(avx512.U8S8, m, n, k)
    got = run(ember.build(s, args, target="c"), avx512.U8S8, m, n, a.reshape(m, k // 4, 4), tiles.pack(w, 4))
    np.testing.assert_array_equal(got, a.astype(np.int32) @ w.astype(np.int32))


@pytest.mark.skipif(shutil.which("objdump") is None or platform.machine() != "x86_64",
                    reason="needs objdump and an x86-64 compiler")
def test_the_vnni_tile_keeps_its_accumulators_in_registers():
    """The 8 x 2 tile's K loop (the span of its 16 vpdpbusd) touches no stack slot: around GCC
    12's own intrinsic it spilled two accumulators there, at half the unit's rate."""
    f = ember.build(*tiles.gemm(avx512.U8S8, 64, 64, 64), target="c")
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(f.path)], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    at = [k for k, line in enumerate(listing) if "vpdpbusd" in line]
    assert len(at) == 16
    assert not [line for line in listing[at[0]:at[-1]] if "(%rsp)" in line]


@pytest.mark.parametrize("cached", [False, True], ids=["in-place", "local-copy"])
def test_a_row_of_k_bytes_tensorizes_as_groups(cached):
    """A (M, K) read as a[i, kg * 4 + g] (qgemm's rows) walks the tile's a (MR, K / 4, 4): strides
    (K, 4, 1); copied into a local tile per call, the copy is compacted to the rows it covers.
    Exact against NumPy on the interpreter and, where this CPU has VNNI, in C."""
    m, n, k = 12, 64, 36
    a = te.placeholder((m, k), "uint8", name="A")
    bp = te.placeholder((n // 16, k // 4, 16, 4), "int8", name="Bp")
    kg, g = te.reduce_axis((0, k // 4), name="kg"), te.reduce_axis((0, 4), name="g")
    c = te.compute((m, n // 16, 16), lambda i, v, lane: te.sum(
        a[i, kg * 4 + g].astype("int32") * bp[v, kg, lane, g].astype("int32"), axis=[kg, g]), name="C")
    s = te.create_schedule(c.op)
    i, v, _ = s[c].op.axis
    io, ii = s[c].split(i, factor=4)
    vo, vi = s[c].split(v, factor=2)
    s[c].reorder(vo, io, ii, vi)
    tile = s[c].fuse(vo, io)
    if cached:
        s[s.cache_read(a, "local", [c])].compute_at(s[c], tile)
    s[c].tensorize(ii, avx512.U8S8.intrin(4, 2, k // 4))
    if cached:
        assert "alloc((4, 36), 'uint8', scope='local')" in str(ember.lower(s, [a, bp, c]))
    rng = np.random.default_rng()
    x = rng.integers(0, 256, (m, k), dtype=np.uint8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    for target in ["python"] + (["c"] if cpu_has("avx512_vnni") else []):
        got = run(ember.build(s, [a, bp, c], target=target), avx512.U8S8, m, n, x, tiles.pack(w, 4))
        np.testing.assert_array_equal(got, x.astype(np.int32) @ w.astype(np.int32), err_msg=target)


def test_tile_packing():
    b = np.arange(8 * 32).reshape(8, 32)
    bp = tiles.pack(b, 2)
    assert bp.shape == (2, 4, 16, 2)
    assert bp[1, 3, 5, 1] == b[3 * 2 + 1, 16 + 5]


def test_a_tile_needs_its_unit_in_the_target():
    s, args = tiles.gemm(avx512.BF16, 8, 32, 16)
    with pytest.raises(ConfigError, match="bf16_avx512_8x32x16 needs avx512bf16"):
        ember.build(s, args, target=Target.x86("avx2"))
    with pytest.raises(ScheduleError, match="no tile"):
        tiles.gemm(amx.BF16, 16, 32, 48)  # K not a multiple of 32
    with pytest.raises(ScheduleError, match=r"not \(16, 2\) over 8"):
        amx.BF16.intrin(16, 2, 8)


@pytest.mark.parametrize("kind", sorted(amx.UNITS))
def test_amx_gemm_on_the_interpreter(kind):
    unit = amx.UNITS[kind]
    m, n, k = 32, 32, 16 * unit.group  # one call of 2 x 2 tiles
    s, args = tiles.gemm(unit, m, n, k)
    a, bp, ref, atol = operands(unit, m, n, k, seed=1)
    np.testing.assert_allclose(run(ember.build(s, args, target="python"), unit, m, n, a, bp), ref, rtol=1e-5, atol=atol)


@pytest.fixture(scope="module")
def amx_kernels():
    """One function per AMX unit (bf16 32 x 32 x 64, int8 16 x 16 x 128), lowered for this machine."""
    shapes = {"bf16": (32, 32, 64), "u8s8": (16, 16, 128), "s8s8": (16, 32, 128)}
    return {kind: (shapes[kind], ember.lower(*tiles.gemm(amx.UNITS[kind], *shapes[kind]), name=f"amx_{kind}"))
            for kind in amx.UNITS}


def test_amx_compiles_for_sapphire_rapids(amx_kernels):
    spr = Target("c", cflags=Target().cflags.replace("-march=native", "") + " -march=sapphirerapids")
    assert {"amx-tile", "amx-bf16", "amx-int8"} <= spr.features
    source = spr.backend.render_kernels([f for _, f in amx_kernels.values()], spr)
    assert all(f"_tile_{op}(" in source for op in ("loadconfig", "loadd", "dpbf16ps", "dpbusd", "dpbssd", "stored"))
    build_library(source, cc=spr.cc, cflags=spr.cflags)  # compiled (the common C once), not run: this CPU may lack AMX


def test_amx_kernels_run_here(amx_kernels):
    """The unit where this CPU has AMX and Linux grants the tile state; where it does not, the
    kernels' own fallback (the same sums in C), which is what this checks on a CPU without AMX."""
    print(f"amx_bf16 on this CPU: {cpu_has('amx_bf16')}, amx_int8: {cpu_has('amx_int8')}")
    here = Target()
    built = build_c_module([f for _, f in amx_kernels.values()], cc=here.cc, cflags=here.cflags, align=here.align)
    for kind, ((m, n, k), _) in amx_kernels.items():
        unit = amx.UNITS[kind]
        a, bp, ref, atol = operands(unit, m, n, k, seed=2)
        np.testing.assert_allclose(run(built[f"amx_{kind}"], unit, m, n, a, bp), ref, rtol=1e-5, atol=atol)


@pytest.mark.skipif(not cpu_has("amx_bf16"), reason="this CPU has no AMX (amx_bf16 in /proc/cpuinfo)")
def test_amx_bf16_gemm_through_build():
    m, n, k = 64, 64, 256
    s, args = tiles.gemm(amx.BF16, m, n, k)
    a, bp, ref, atol = operands(amx.BF16, m, n, k, seed=3)
    np.testing.assert_allclose(run(ember.build(s, args, target="c"), amx.BF16, m, n, a, bp), ref, rtol=1e-5, atol=atol)
