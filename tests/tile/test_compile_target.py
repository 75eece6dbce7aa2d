"""The target of a tile launch: its `target=` option, else the kernel's own (`@jit(target=)`),
else "c"; the kernel is specialized, emitted (by the backend's `tile_emitter`), rendered and
built for it, and a backend that launches no tile kernels is refused before anything compiles;
tl.dot's register tile is sized to the target's vector registers."""

import sys

import numpy as np
import pytest

import ember.triton as triton
import ember.triton.compiler.launch  # noqa: F401 - the module, not the function of the same name
import ember.triton.language as tl
from ember.backends.c import CBackend
from ember.errors import ConfigError
from ember.target import Target, machine_features
from ember.tir.expr import Buffer, as_int, const
from ember.triton.compiler.vector import VectorEmitter

AVX2 = Target.x86("avx2")
tlaunch = sys.modules["ember.triton.compiler.launch"]
runs_avx2 = pytest.mark.skipif(not {"avx2", "fma"} <= (machine_features() or frozenset()),
                               reason="this machine lacks AVX2 and FMA")


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    monkeypatch.delenv("EMBER_INTERPRET", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _arrays(n=1000):
    rng = np.random.default_rng()
    return rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32), np.zeros(n, np.float32)


@runs_avx2
def test_a_launch_compiles_for_its_target_option():
    x, y, out = _arrays()
    compiled = axpy[(8,)](x, y, out, 1000, 1.5, BLOCK=128, target=AVX2)
    np.testing.assert_allclose(out, 1.5 * x + y, rtol=1e-6, atol=1e-6)
    default = axpy.compile(x, y, out, 1000, 1.5, BLOCK=128)
    assert compiled.key != default.key  # another specialization, with AVX2's 8-lane vectors
    assert "float32x8" in compiled.source and "float32x8" not in default.source.replace("float32x16", "")


@runs_avx2
def test_a_kernel_s_own_target_and_a_launch_overriding_it():
    own = triton.jit(target=AVX2)(axpy.fn)
    x, y, out = _arrays()
    assert own.compile(x, y, out, 1000, 1.5, BLOCK=128).key == axpy.compile(x, y, out, 1000, 1.5, BLOCK=128,
                                                                              target=AVX2).key
    assert own.compile(x, y, out, 1000, 1.5, BLOCK=128, target="c").key == axpy.compile(x, y, out, 1000, 1.5,
                                                                                         BLOCK=128).key
    own[(8,)](x, y, out, 1000, -2.0, BLOCK=128)
    np.testing.assert_allclose(out, -2.0 * x + y, rtol=1e-6, atol=1e-6)


def test_a_parameter_named_target_is_an_argument():
    @triton.jit
    def copy(src, target, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(target + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

    x, _, out = _arrays(50)
    copy[(1,)](x, out, 50, BLOCK=64)
    np.testing.assert_array_equal(out, x)


def test_the_emitter_is_the_backend_s(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))  # (compiled here, not found in a cache)
    monkeypatch.setattr(tlaunch, "_table", {})
    made = []

    class Spy(VectorEmitter):
        def __init__(self, target, debug, num_warps, num_stages):
            made.append(target)
            super().__init__(target, debug, num_warps, num_stages)

    monkeypatch.setattr(CBackend, "tile_emitter", Spy)

    @triton.jit
    def center(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr + offs, v - tl.sum(v, axis=0) / n, mask=offs < n)

    x, _, out = _arrays(40)
    target = Target("c", align=128)
    center[(1,)](x, out, 40, BLOCK=64, target=target)
    np.testing.assert_allclose(out, x - x.mean(), rtol=1e-5, atol=1e-5)
    assert made == [target]
    # its local buffers rendered at the target's alignment
    assert "aligned(128)" in center.source(x, out, 40, BLOCK=64, target=target)


@pytest.mark.parametrize("kind", ["python"])
def test_a_backend_without_tile_kernels_is_refused_naming_the_target(kind, monkeypatch):
    monkeypatch.setattr(tlaunch, "specialize", None)  # (nothing may be specialized or compiled)
    x, y, out = _arrays(10)
    with pytest.raises(ConfigError, match=f"target '{kind}' launches no tile kernels"):
        axpy[(1,)](x, y, out, 10, 1.0, BLOCK=16, target=kind)


def test_a_bad_target_is_refused():
    with pytest.raises(ConfigError, match="unknown target 'tpu'"):
        triton.jit(target="tpu")(axpy.fn)
    x, y, out = _arrays(10)
    with pytest.raises(ConfigError, match="unknown target 'tpu'"):
        axpy[(1,)](x, y, out, 10, 1.0, BLOCK=16, target="tpu")


@pytest.mark.parametrize("target, registers, rows", [(Target.x86("avx512"), 32, 8), (Target.x86("avx2"), 16, 4)])
def test_the_dot_register_tile_fits_the_target_s_registers(target, registers, rows):
    """tl.dot of 64 x 64 blocks: a tile of rows x 2 vectors of accumulators, a broadcast of A and 2
    vectors of B within 32 registers (AVX-512: 8 rows of 16 lanes) or 16 (AVX2: 4 rows of 8)."""
    a, b, c = (Buffer(name, (const(64 * 64),), "float32") for name in "abc")
    em = VectorEmitter(target, debug=False)
    em.dot(a, b, c, 64, 64, 64)
    (nest,) = em.lists[0]
    tile = nest.body.body.buffer  # for i0: for j0: the accumulator tile
    assert target.vector_registers == registers
    assert as_int(tile.shape[0]) == rows * 2 * target.lanes() <= 64 * 64
