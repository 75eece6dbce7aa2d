"""te.extern: outputs written by a hand-built loop-IR statement, one opaque block, lowered and
built like any compute (here a running sum, which te's computes cannot say)."""

import numpy as np
import pytest

import ember
from ember import te
from ember.te import TEError
from ember.tir.expr import Var, as_int, const
from ember.tir.stmt import BufferStore, For, seq


def running_sum(ins, outs):
    (a,), (b,) = ins, outs
    i = Var("i")
    return seq(BufferStore(b, a[0], (const(0),)),
               For(i, const(0), a.shape[0] - 1, "serial", BufferStore(b, b[i] + a[i + 1], (i + 1,))))


@pytest.mark.parametrize("target", ["c", "python"])
def test_running_sum(target):
    n = te.var("n")
    a = te.placeholder((n,), name="a")
    (b,) = te.extern([((n,), "float32")], [a], running_sum, name="scan")
    doubled = te.compute((n,), lambda i: b[i] * 2.0, name="doubled")
    s = te.create_schedule(doubled.op)
    f = ember.build(s, [a, doubled], target=target)
    for size in (1, 7, 40):
        x = np.random.default_rng(size).uniform(-1, 1, size).astype("float32")
        out = np.full(size, np.nan, "float32")
        f(x, out)
        np.testing.assert_allclose(out, 2 * np.cumsum(x), rtol=1e-5, atol=1e-6)


def test_extern_block_reads_and_writes_whole_buffers():
    a = te.placeholder((8,), name="a")
    (b,) = te.extern([((8,), "float32")], [a], running_sum, name="scan")
    block = te.create_prim_func([a, b]).body.block.body.block
    assert block.name == "scan" and block.iter_vars == ()
    assert [r.buffer for r in block.reads] == [a.buffer] and [w.buffer for w in block.writes] == [b.buffer]
    assert all(as_int(r.region[0].min) == 0 and as_int(r.region[0].extent) == 8 for r in block.reads + block.writes)


def test_inputs_must_be_tensors():
    with pytest.raises(TEError, match="takes te tensors as inputs"):
        te.extern([((8,), "float32")], [np.zeros(8)], running_sum, name="scan")
