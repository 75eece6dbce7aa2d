"""How act int8_rows' kernel shares a prefill's product between threads (ember/tir/nbits_split.py,
which the C mirrors): every (block, panel) computed once and every row quantized once, at any
thread count; a short prompt's two blocks on more threads split their panels; and the compiled
product (residual and glu "silu" epilogues too) at 1, 2, 3, 5 and 8 threads (OpenMP runs more
threads than cores) against the graph's reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.quantize_rows import FEATURES
from ember.passes.quantize_weights import WeightFormat, quantize_weights
from ember.target import Target
from ember.tir.nbits_split import ROWS_BLOCK, blocks, rows_quantized, rows_task, rows_threads

RNG = np.random.default_rng()


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 700), panels=st.integers(1, 100), threads=st.integers(1, 40))
def test_every_block_panel_and_row_once(m, panels, threads):
    t_count = rows_threads(m, 4096, panels * 32, panels, threads)
    assert 1 <= t_count <= threads
    done, quantized = [], []
    for t in range(t_count):
        b0, b1, p0, p1 = rows_task(m, panels, t_count, t)
        done += [(b, p) for b in range(b0, b1) for p in range(p0, p1)]
        r0, r1 = rows_quantized(m, t_count, t)
        quantized += range(r0, r1)
    assert sorted(done) == [(b, p) for b in range(blocks(m)) for p in range(panels)]
    assert quantized == list(range(m))


def test_a_short_prompt_uses_every_thread():
    """128 tokens are two blocks of rows: at 8 threads each block's panels are split four ways
    (GPT-2 small's 768 x 768 product: 24 panels), where the split by blocks alone used two."""
    assert blocks(128) == 2 and ROWS_BLOCK == 64
    threads = rows_threads(128, 768, 768, 24, 8)
    assert threads == 8
    tasks = [rows_task(128, 24, threads, t) for t in range(threads)]
    assert sum(p1 > p0 and b1 > b0 for b0, b1, p0, p1 in tasks) == 8
    assert {(b0, p1 - p0) for b0, _, p0, p1 in tasks} == {(0, 6), (1, 6)}
    assert rows_threads(128, 768, 768, 24, 2) == 2 and rows_task(128, 24, 2, 1) == (1, 2, 0, 24)


def _model(k: int, n: int, glu: bool):
    """x (seq, k) through a quantized product of n columns (glu: silu(gate) * up of n / 2 each)
    plus x's first columns (the residual's add) compiled by ember.compile."""
    import ember

    g = Graph()
    x = g.add_input("x", TensorType(("seq", k)))
    (y,) = add_op(g, "gemm", [x, g.add_constant(RNG.standard_normal((k, n)).astype(np.float32) / 8, "w")])
    (y3,) = add_op(g, "reshape", [y], {"shape": (1, "seq", n)})
    if glu:
        gate, up = add_op(g, "split", [y3], {"axis": -1, "sizes": (n // 2, n // 2)})
        g.set_outputs(add_op(g, "mul", [add_op(g, "silu", [gate])[0], up]))
    else:
        (r,) = add_op(g, "reshape", [add_op(g, "slice", [x], {"starts": (0,), "ends": (n,), "axes": (1,)})[0]],
                      {"shape": (1, "seq", n)})
        g.set_outputs(add_op(g, "add", [y3, r]))
    return ember.compile(quantize_weights(g, WeightFormat.of("int4", 32)))


@pytest.mark.parametrize("glu", [False, True])
def test_compiled_product_at_many_threads(glu):
    from ember.ops.evaluate import evaluate

    model = _model(288, 128 if glu else 200, glu)  # 7 panels, the last of 8 columns; glu: 2 output panels
    products = [n for n in model.graph.nodes if n.op == "gemm_nbits"]
    if Target().features >= FEATURES:
        assert [(n.attrs["act"], n.attrs["glu"], n.attrs["residual"]) for n in products] == \
            [("int8_rows", "silu" if glu else None, not glu)]
    for m in (1, 3, 13, 70, 128):
        rows = RNG.standard_normal((m, 288)).astype(np.float32)
        (want,) = evaluate(model.graph, rows)
        for threads in (1, 2, 3, 5, 8):
            model.num_threads = threads
            np.testing.assert_allclose(model(rows), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                                       err_msg=f"{m} rows, {threads} threads")
