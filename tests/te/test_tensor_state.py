"""Tensor expressions keep no state outside the tensors: a compute finds its inputs through the
loads in its body, nothing is registered anywhere, and the loop IR made from them is plain (it
pickles to a worker process and back)."""

from __future__ import annotations

import gc
import pickle
import weakref

import numpy as np
import pytest

import ember
from ember import te
from ember.te.tensor import TEError, TensorLoad, input_tensors_of
from ember.tir.expr import Binary, BufferLoad, Var
from ember.tir.functor import visit_expr, visit_stmt
from ember.tir.stmt import BufferStore
from ember.tir.structural import structural_hash


def _made_and_dropped() -> list[weakref.ref]:
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    te.create_prim_func([A, B])
    return [weakref.ref(A), weakref.ref(B), weakref.ref(B.op)]


def test_tensors_are_not_kept_alive():
    refs = _made_and_dropped()
    gc.collect()
    assert all(r() is None for r in refs)


def test_inputs_found_from_loads_built_outside_the_compute():
    A = te.placeholder((6, 4), name="A")
    Bt = te.placeholder((4,), name="Bt")
    k = te.reduce_axis((0, 4), name="k")
    row = A[0, k] * Bt[k]  # built before the compute that uses it
    C = te.compute((6,), lambda i: te.sum(A[i, k] * Bt[k] + row * 0, axis=k), name="C")
    assert set(C.op.input_tensors) == {A, Bt}
    assert [op.name for op in input_tensors_of([C])] == ["A", "Bt", "C"]


def test_a_buffer_indexed_directly_is_refused_by_name():
    A = te.placeholder((4,), name="A")
    C = te.compute((4,), lambda i: A.buffer[i] * 2, name="C")
    with pytest.raises(TEError, match=r"compute 'C' reads buffer A, which is not a te tensor"):
        C.op.input_tensors  # noqa: B018


def test_loop_ir_holds_plain_loads_and_pickles():
    rng = np.random.default_rng()
    A = te.placeholder((5, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    S = te.compute((5,), lambda i: te.sum(A[i, k], axis=k, where=A[i, k] > 0), name="S")
    D = te.compute((5,), lambda i: S[i] * A[i, 0], name="D")
    func = te.create_prim_func([A, D])
    loads = []

    def on_stmt(s):
        if isinstance(s, BufferStore):
            visit_expr(s.value, lambda e: loads.append(e) if isinstance(e, BufferLoad) else None)

    visit_stmt(func.body, on_stmt)
    assert loads and not any(isinstance(e, TensorLoad) for e in loads)
    again = pickle.loads(pickle.dumps(func))
    assert structural_hash(again) == structural_hash(func)
    a = rng.standard_normal((5, 7)).astype("float32")
    d = np.empty(5, "float32")
    ember.build(again, target="python")(a, d)
    np.testing.assert_allclose(d, np.where(a > 0, a, 0).sum(1) * a[:, 0], rtol=1e-5, atol=1e-6)


def test_iteration_variables_stand_for_their_variable():
    k = te.reduce_axis((0, 4), name="k")
    assert k.as_prim_expr() is k.var
    e = k * 2 + 1
    assert isinstance(e, Binary) and isinstance(e.a, Binary) and e.a.a is k.var
    assert isinstance(-k, Binary) and isinstance(k < 3, Binary) and isinstance(8 // k, Binary)
    other = te.reduce_axis((0, 4), name="k")
    assert k == k and k != other  # identity, usable as a key
    assert isinstance(k.var, Var) and {k: 1}[k] == 1
