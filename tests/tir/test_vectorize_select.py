"""Vectorization of a select whose condition differs per lane: loads of a kernel's own local
scratch may be read for every lane where their index is proved inside the scratch; loads of
other memory, and of scratch the guard keeps them out of (the copy of a padded input), keep the
loop for the C compiler, since a lane the select discards may lie out of bounds."""

import numpy as np
import pytest

import ember
from ember import te
from ember.runtime.module import build_c, build_python
from ember.testing import random_array
from ember.tir import Schedule
from ember.tir.dtype import lanes_of
from ember.tir.expr import Buffer, BufferLoad, Var, const, select
from ember.tir.functor import visit_expr, visit_stmt
from ember.tir.lower import lower
from ember.tir.stmt import Allocate, BufferStore, For, PrimFunc, seq
from ember.tir.transform.vectorize import vectorize


def kernel(scope: str) -> PrimFunc:
    a = Buffer("A", (const(16),), "float32")
    out = Buffer("B", (const(16),), "float32")
    src = Buffer("T", (const(16),), "float32", scope=scope) if scope == "local" else a
    i, j = Var("i"), Var("j")
    guarded = select(i < 5, BufferLoad(src, (i,), "float32"), const(-1.0))
    body = For(i, const(0), const(16), "vectorized", BufferStore(out, guarded, (i,)))
    if scope == "local":
        fill = For(j, const(0), const(16), "serial", BufferStore(src, BufferLoad(a, (j,), "float32") * 2.0, (j,)))
        body = Allocate(src, seq(fill, body))
    return PrimFunc("guarded", (a, out), body)


def shifted(shift: int) -> PrimFunc:
    """B[i] = 2 * A[i + shift] where i + shift lies in A, else -1: the doubled A is local scratch
    of A's 16 elements, and the select's guard is all that keeps lane 0 (shift -1) or lane 15
    (shift 1) out of it."""
    a, out = Buffer("A", (const(16),), "float32"), Buffer("B", (const(16),), "float32")
    t = Buffer("T", (const(16),), "float32", scope="local")
    i, j = Var("i"), Var("j")
    guarded = select((i + shift >= 0) & (i + shift < 16), BufferLoad(t, (i + shift,), "float32"), const(-1.0))
    fill = For(j, const(0), const(16), "serial", BufferStore(t, BufferLoad(a, (j,), "float32") * 2.0, (j,)))
    return PrimFunc("shifted", (a, out), Allocate(t, seq(fill, For(i, const(0), const(16), "vectorized",
                                                                   BufferStore(out, guarded, (i,))))))


def vector_loads(func: PrimFunc, name: str | None = None) -> list:
    """The loads of more than one lane in func's stores (of buffer `name` only, if given)."""
    found = []

    def on_stmt(s):
        if isinstance(s, BufferStore):
            visit_expr(s.value, lambda e: found.append(e) if isinstance(e, BufferLoad) and lanes_of(e.dtype) > 1
                       and name in (None, e.buffer.name) else None)

    visit_stmt(func.body, on_stmt)
    return found


def vectorized_loops(func: PrimFunc) -> list:
    found = []
    visit_stmt(func.body, lambda s: found.append(s) if isinstance(s, For) and s.kind == "vectorized" else None)
    return found


def test_select_over_local_scratch_vectorizes():
    assert vector_loads(vectorize(kernel("local"), 64))
    a = np.random.default_rng().random(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    build_c(lower(kernel("local"), skip=("hoist_init", "compact_buffers"), vector_bytes=64))(a, out)
    np.testing.assert_array_equal(out, np.where(np.arange(16) < 5, a * 2, -1))


def test_select_over_other_memory_keeps_the_loop():
    lowered = vectorize(kernel("global"), 64)
    assert not vector_loads(lowered)
    assert vectorized_loops(lowered)


@pytest.mark.parametrize("vector_bytes", [16, 64])  # in chunks of 4 lanes, and the 16 lanes as one
def test_select_over_local_scratch_proved_inside_vectorizes_in_chunks(vector_bytes):
    """The proof holds for each chunk of a loop split into registers as for the whole loop."""
    lowered = lower(kernel("local"), skip=("hoist_init", "compact_buffers"), vector_bytes=vector_bytes)
    assert len(vector_loads(lowered, "T")) == 16 * 4 // vector_bytes and not vectorized_loops(lowered)


@pytest.mark.parametrize("shift", [-1, 1])
@pytest.mark.parametrize("vector_bytes", [16, 64])
def test_select_over_local_scratch_beyond_its_ends_keeps_the_loop(shift, vector_bytes):
    """T[i - 1] at lane 0 and T[i + 1] at lane 15 lie outside T: the select keeps them scalar,
    and the interpreter (where a vector slice that leaves T fails) and C agree with NumPy."""
    lowered = lower(shifted(shift), skip=("hoist_init", "compact_buffers"), vector_bytes=vector_bytes)
    assert not vector_loads(lowered, "T") and vectorized_loops(lowered)
    a = random_array((16,), "float32")
    src = np.arange(16) + shift
    expected = np.where((src >= 0) & (src < 16), 2 * a[np.clip(src, 0, 15)], -1).astype(np.float32)
    for build in (build_python, build_c):
        out = random_array((16,), "float32")
        build(lowered)(a, out)
        np.testing.assert_array_equal(out, expected, err_msg=build.__name__)


def padded_conv2d():
    """conv2d's stages as the schedule property test writes them: P pads X by one on each side."""
    X = te.placeholder((1, 2, 6, 6), name="X")
    W = te.placeholder((3, 2, 3, 3), name="W")
    P = te.compute((1, 2, 8, 8), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h < 7, w >= 1, w < 7), X[n, c, h - 1, w - 1], 0.0), name="P")
    rc, ry, rx = te.reduce_axis((0, 2), name="rc"), te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    Y = te.compute((1, 3, 6, 6), lambda n, f, y, x: te.sum(
        P[n, rc, y + ry, x + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    return te.create_prim_func([X, W, Y])


@pytest.fixture(scope="module")
def padded_copy():
    """A schedule the property test found: P's h loop vectorized, its n loop split, and P's input
    copied to local scratch X_local (cache_read). P reads X_local[c, h - 1, w - 1] under its
    padding guard, so lane h = 0 (and h = 7) of a vector over h lies outside X_local."""
    sch = Schedule(padded_conv2d())
    n, _, h, _ = sch.get_loops(sch.get_block("P"))
    sch.vectorize(h)
    n, _, _, _ = sch.get_loops(sch.get_block("P"))
    sch.split(n, factors=[2, None])
    sch.cache_read(sch.get_block("P"), 0, "local")
    return sch.mod


def conv2d_reference(x, w):
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), (2, 3))
    return np.einsum("ncyxij,fcij->nfyx", windows, w)


@pytest.mark.parametrize("vector_bytes", [None, 16, 32, 64])  # the interpreter's, SSE's, AVX2's, AVX-512's widths
def test_padded_input_copy_is_not_read_for_every_lane(padded_copy, vector_bytes):
    """The guarded load of X_local stays per lane at every vector width; the loop IR lowered for
    that width, run by the interpreter (an index past X_local raises IndexError there), matches
    NumPy. Before, X_local was loaded as a vector at h - 1 for every lane h."""
    lowered = lower(padded_copy, vector_bytes=vector_bytes)
    assert not vector_loads(lowered, "X_local")
    assert vectorized_loops(lowered)  # the C compiler's vectorizer gets the loop
    x, w = random_array((1, 2, 6, 6), "float32"), random_array((3, 2, 3, 3), "float32")
    y = random_array((1, 3, 6, 6), "float32")
    build_python(lowered)(x, w, y)
    np.testing.assert_allclose(y, conv2d_reference(x, w), rtol=1e-5, atol=1e-5)


def test_padded_input_copy_in_c(padded_copy):
    """The same for the C target's own width (in C the vector load read past X_local unchecked):
    the kernels built for C and for the interpreter match NumPy."""
    lowered = ember.lower(padded_copy, target="c")
    assert not vector_loads(lowered, "X_local")
    x, w = random_array((1, 2, 6, 6), "float32"), random_array((3, 2, 3, 3), "float32")
    for target in ("python", "c"):
        y = random_array((1, 3, 6, 6), "float32")
        ember.build(padded_copy, target=target)(x, w, y)
        np.testing.assert_allclose(y, conv2d_reference(x, w), rtol=1e-5, atol=1e-5, err_msg=target)
