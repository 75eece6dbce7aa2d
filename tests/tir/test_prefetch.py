"""Prefetch of the next panel of packed weights (ember.tir.transform.prefetch): a GEMM over
weights in panels (N / P, K, P) fetches, in each row tile's k loop, its share of the next panel;
every prefetched element is inside the buffer, the R tiles of a panel together fetch every cache
line of the next one (the last panel's the first's), and the kernel computes what NumPy does,
with the pass and without."""

import numpy as np
import pytest

import ember
from ember.graph import TensorType
from ember.schedules.apply import node_kernel
from ember.tir.expr import PREFETCH, Binary, Call, Cast, Const, Var
from ember.tir.functor import collect
from ember.tir.stmt import Evaluate, For

RNG = np.random.default_rng()
P = 32  # the panel width of the CPU schedule's register tile (two vectors of 16 lanes)


def _kernel(m: int, k: int, n: int):
    types = [TensorType((m, k), "float32"), TensorType((n // P, k, P), "float32"), TensorType((n,), "float32")]
    return node_kernel("gemm", types, {"alpha": 1.0, "beta": 1.0, "trans_a": False, "trans_b": False,
                                       "b_panels": P, "tf32": False}, [TensorType((m, n), "float32")])


def _prefetches(func) -> list[Evaluate]:
    return collect(func.body, lambda s: isinstance(s, Evaluate) and isinstance(s.value, Call)
                   and s.value.name == PREFETCH)


def _value(e, env: dict):
    """An integer index expression over NumPy arrays of its variables' values."""
    match e:
        case Var():
            return env[e]
        case Const(value):
            return np.int64(value)
        case Cast(_, v):
            return _value(v, env)
        case Binary(op, a, b):
            x, y = _value(a, env), _value(b, env)
            return {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide,
                    "%": np.mod}[op](x, y)
    raise TypeError(f"unexpected node {type(e).__name__} in a prefetch index")


@pytest.mark.parametrize("m, k, n", [(32, 64, 96), (128, 48, 64), (40, 33, 128), (512, 16, 32)])
def test_row_tiles_fetch_all_of_the_next_panel(m, k, n):
    s, args = _kernel(m, k, n)
    func = ember.lower(s, args)
    (fetch,) = _prefetches(func)
    loops = {f.loop_var: f for f in collect(func.body, lambda x: isinstance(x, For))}
    target = fetch.value.args[0]
    assert target.buffer.name == args[1].buffer.name
    (index,) = target.indices  # flattened
    (parallel,) = [f for f in loops.values() if f.kind == "parallel"]
    (k_loop,) = [f for f in loops.values() if f.kind == "serial" and fetch in collect(f.body, lambda x: True)]
    tiles = int(parallel.extent.value)
    f, kk = np.meshgrid(np.arange(tiles), np.arange(k), indexing="ij")
    flat = np.broadcast_to(_value(index, {parallel.loop_var: f, k_loop.loop_var: kk}), f.shape)
    panels, panel_size = n // P, k * P
    assert flat.min() >= 0 and flat.max() < panels * panel_size
    row_tiles = tiles // panels
    for p in range(panels):
        fetched = flat[p * row_tiles:(p + 1) * row_tiles]
        nxt = (p + 1) % panels
        assert (fetched // panel_size == nxt).all()
        lines = np.unique(fetched * 4 // 64)
        first, last = nxt * panel_size * 4 // 64, ((nxt + 1) * panel_size * 4 - 1) // 64
        assert set(lines) == set(range(first, last + 1))


@pytest.mark.parametrize("skip", [(), ("prefetch",)])
def test_gemm_with_prefetch_matches_numpy(skip):
    m, k, n = 37, 70, 96
    s, args = _kernel(m, k, n)
    assert bool(_prefetches(ember.lower(s, args, skip=skip))) == (not skip)
    f = ember.build(s, args, skip=skip)
    a, w, bias = RNG.uniform(-1, 1, (m, k)), RNG.uniform(-1, 1, (k, n)), RNG.uniform(-1, 1, n)
    panels = w.reshape(k, n // P, P).transpose(1, 0, 2)
    out = np.empty((m, n), "float32")
    f(a.astype("float32"), np.ascontiguousarray(panels, "float32"), bias.astype("float32"), out)
    np.testing.assert_allclose(out, a @ w + bias, rtol=1e-5, atol=1e-5)


def test_a_single_row_tile_fetches_nothing():
    """Eight rows are one tile per panel: it would fetch the next panel as fast as it reads its own."""
    s, args = _kernel(8, 64, 96)
    assert not _prefetches(ember.lower(s, args))
