"""The loop-IR verifier: silent on every stage of a real lowering, and with EMBER_DEBUG=1 (or
debug=True) it names the lowering pass that broke a function and what is broken."""

import importlib
from dataclasses import replace

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import LowerError
from ember.graph import parse_graph
from ember.te.to_tir import create_prim_func
from ember.tir.expr import Buffer, Var, const
from ember.tir.functor import mutate_stmt
from ember.tir.stmt import BufferStore, For, PrimFunc
from ember.tir.verify import problems, verify

lower_module = importlib.import_module("ember.tir.lower")  # ember.tir.lower is the function


def scheduled_gemm():
    A = te.placeholder((32, 16), name="A")
    B = te.placeholder((16, 32), name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((32, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((32, 32), lambda i, j: te.max(C[i, j], 0.0), name="D")
    s = te.create_schedule(D.op)
    io, jo, ii, ji = s[D].tile(D.op.axis[0], D.op.axis[1], 8, 8)
    s[C].compute_at(s[D], jo)
    s[D].vectorize(ji)
    s[D].unroll(ii)
    return s, [A, B, D]


def test_every_stage_of_a_real_lowering_verifies():
    s, args = scheduled_gemm()
    func = ember.lower(s, args)  # the verifier is off by default
    assert problems(func) == []
    lower_module.lower(s.to_prim_func(args), debug=True, vector_bytes=64)


def _drop_outer_loop(func: PrimFunc) -> PrimFunc:
    """A broken pass: the outermost loop disappears, its variable still used inside."""
    return func.with_body(mutate_stmt(func.body, f_stmt=lambda s: s.body if isinstance(s, For) and s.loop_var.name
                                      .startswith("i") else None))


def test_a_broken_lowering_pass_is_named(monkeypatch):
    passes = [(n, _drop_outer_loop if n == "flatten" else fn) for n, fn in lower_module.PASSES]
    for kind in ("c", "python"):  # the loop passes each backend runs
        monkeypatch.setattr(ember.target.as_target(kind).backend, "loop_passes", passes)
    monkeypatch.delenv("EMBER_DEBUG", raising=False)
    s, args = scheduled_gemm()
    ember.lower(s, args)  # unnoticed without debug
    with pytest.raises(LowerError, match=r"after lowering pass flatten: kernel main: \d+ problem\(s\):\n"
                                         r".*variable i\S* is used where it is not defined"):
        lower_module.lower(s.to_prim_func(args), debug=True, passes=passes)
    monkeypatch.setenv("EMBER_DEBUG", "1")
    with pytest.raises(LowerError, match="after lowering pass flatten"):
        ember.build(s, args, target="python")


def test_undeclared_buffers_and_mixed_dtypes_are_reported():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    func = create_prim_func([A, B])
    assert problems(func) == []
    stray = Buffer("stray", (const(8),), "float32")
    i = Var("i")
    bad_store = BufferStore(B.buffer, const(1.0, "float64"), (i,))
    broken = func.with_body(mutate_stmt(func.body, f_stmt=lambda s: (
        replace(s, buffer=stray) if isinstance(s, BufferStore) else None)))
    found = problems(broken)
    assert any("buffer stray is neither a parameter nor allocated" in p for p in found)
    loop = For(i, const(0), const(8), "serial", bad_store)
    found = problems(replace(func, body=loop))
    assert found == ["store to B: stores a float64 value into a float32 buffer"]
    with pytest.raises(LowerError, match="after my pass: kernel main: 1 problem"):
        verify(replace(func, body=loop), "my pass")


def test_debug_compile_of_a_model_verifies_every_pass(monkeypatch):
    monkeypatch.setenv("EMBER_DEBUG", "1")
    g = parse_graph("""
graph main(%x: float32[4, 8]) {
  %y: float32[4, 8] = relu(%x)
  %z: float32[4, 8] = add(%y, %y)
  return %z
}""")
    x = np.random.default_rng().standard_normal((4, 8)).astype("float32")
    np.testing.assert_allclose(ember.compile(g, jobs=1)(x), 2 * np.maximum(x, 0), rtol=1e-6)
