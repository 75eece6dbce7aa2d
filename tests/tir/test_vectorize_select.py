"""Vectorization of a select whose condition differs per lane: loads of a kernel's own local
scratch may be read for every lane (they stay inside it); loads of other memory keep the loop
for the C compiler, since a lane the select discards may lie out of bounds."""

import numpy as np

from ember.runtime.module import build_c
from ember.tir.expr import Buffer, BufferLoad, Ramp, Var, const, select
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


def vector_loads(func: PrimFunc) -> list:
    found = []

    def on_stmt(s):
        if isinstance(s, BufferStore):
            visit_expr(s.value, lambda e: found.append(e) if isinstance(e, BufferLoad)
                       and isinstance(e.indices[0], Ramp) else None)

    visit_stmt(func.body, on_stmt)
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
    found = []
    visit_stmt(lowered.body, lambda s: found.append(s) if isinstance(s, For) and s.kind == "vectorized" else None)
    assert found
