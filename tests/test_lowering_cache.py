"""The lowered kernels a process keeps (ember.lowering.LOWERED): a graph compiled again with other
weights lowers and renders nothing again and computes with its own weights; a graph that differs in a shape,
an attribute, or a constant written into the code (a clip bound, 0.0 against -0.0) lowers anew;
compiles that print or verify the loop IR, tuned compiles and other targets do not take kernels
from it; it keeps at most its size, least recently used out first; threads share it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ember.lowering
from ember.codegen.c import CRenderer
from ember.compiler import compile_graph
from ember.graph import Graph, TensorType
from ember.graph.core import Attrs
from ember.lowering import LOWERED, LoweredCache, Workload
from ember.ops.nodes import add_op
from ember.testing import random_array

RTOL, ATOL = 1e-5, 1e-5


def dense(w: np.ndarray, b: np.ndarray, lo: float = -0.5, hi: float = 0.5, rows: int = 8):
    """clip(x @ w + b, lo, hi), w and b constants; and its NumPy reference."""
    g = Graph("dense")
    x = g.add_input("x", TensorType((rows, w.shape[0])))
    (h,) = add_op(g, "matmul", [x, g.add_constant(w, "w")])
    (h,) = add_op(g, "add", [h, g.add_constant(b, "b")])
    g.set_outputs(add_op(g, "clip", [h], {"min": lo, "max": hi}))
    return g, lambda x: np.clip(x.astype(np.float64) @ w + b, lo, hi)


def weights(k: int = 24, n: int = 40):
    return random_array((k, n)), random_array((n,))


@pytest.fixture
def lowerings(monkeypatch):
    """The workloads lowered from now on (ember.lowering.lower_workload's calls), LOWERED emptied
    and none read from the disk."""
    monkeypatch.setenv("EMBER_LOWERED_CACHE", "0")
    LOWERED.clear()
    calls = []
    lower = ember.lowering.lower_workload
    monkeypatch.setattr(ember.lowering, "lower_workload", lambda w, *a: calls.append(w) or lower(w, *a))
    return calls


def check(cm, ref, rows: int = 8, k: int = 24):
    x = random_array((rows, k))
    np.testing.assert_allclose(cm(x), ref(x), rtol=RTOL, atol=ATOL)


def test_other_weights_lower_nothing_again(lowerings, monkeypatch):
    rendered = []
    render = CRenderer.render_kernel
    monkeypatch.setattr(CRenderer, "render_kernel", lambda self, f: rendered.append(f) or render(self, f))
    (g1, ref1), (g2, ref2) = dense(*weights()), dense(*weights())
    first = compile_graph(g1, jobs=1)
    assert lowerings and first.stats.reused == 0 and len(LOWERED) == first.stats.lowered
    assert len(rendered) == first.stats.kernels
    done = len(lowerings)
    second = compile_graph(g2, jobs=1)
    assert len(lowerings) == done  # every kernel came from LOWERED
    assert len(rendered) == first.stats.kernels  # and its C too
    assert second.stats.reused == second.stats.lowered == first.stats.lowered
    assert LOWERED.hits == second.stats.lowered
    assert second.source == first.source  # the same C: the weights are buffers, not code
    check(first, ref1)
    check(second, ref2)
    check(first, ref1)  # the first model still computes with its own weights


@pytest.mark.parametrize("change", [
    dict(rows=5),  # another shape
    dict(hi=0.25),  # another attribute, written into the kernel as a constant
    dict(lo=-0.0, hi=0.0),  # a bound Python calls equal to 0.0 (and hashes alike), not the code
])
def test_a_different_structure_lowers_anew(lowerings, change):
    w, b = weights()
    base, _ = dense(w, b, lo=0.0, hi=0.5)
    compile_graph(base, jobs=1)
    done = len(lowerings)
    g, ref = dense(w, b, **{"lo": 0.0, "hi": 0.5, **change})
    cm = compile_graph(g, jobs=1)
    assert len(lowerings) > done and cm.stats.reused < cm.stats.lowered
    check(cm, ref, rows=change.get("rows", 8))


def test_workloads_are_equal_only_when_their_code_would_be():
    t = TensorType((4,))

    def clip(lo) -> Workload:
        return Workload((t,), (("clip", Attrs({"min": lo, "max": None}), ((-1, 0),), (t,)),), ((0, 0),))

    assert clip(0.0) == clip(0.0) and hash(clip(0.0)) == hash(clip(0.0))
    assert len({clip(0.0), clip(-0.0), clip(0), clip(False), clip(1), clip(1.0), clip(True)}) == 7
    assert clip((1, 2.0)) != clip((1.0, 2.0))  # inside tuples too


def test_the_cache_keeps_its_size_least_recently_used_out_first():
    cache = LoweredCache(2)
    cache.put(("a",), "A")
    cache.put(("b",), "B")
    assert cache.get(("a",)) == "A"  # a is now the most recently used
    cache.put(("c",), "C")
    assert len(cache) == 2 and cache.get(("b",)) is None and cache.get(("c",)) == "C"
    assert (cache.hits, cache.misses) == (2, 1)
    cache.clear()
    assert len(cache) == 0 and (cache.hits, cache.misses) == (0, 0)


@pytest.mark.parametrize("variable", ["EMBER_PRINT_LOWER", "EMBER_DEBUG"])
def test_printing_or_verifying_the_loop_ir_lowers_every_kernel(lowerings, monkeypatch, capsys, variable):
    g, ref = dense(*weights())
    compile_graph(g, jobs=1)
    done = len(lowerings)
    monkeypatch.setenv(variable, "1")
    cm = compile_graph(g, jobs=1)
    assert len(lowerings) == 2 * done and cm.stats.reused == 0
    if variable == "EMBER_PRINT_LOWER":
        assert "# after vectorize" in capsys.readouterr().err
    check(cm, ref)


def test_each_target_lowers_its_own_kernels(lowerings):
    g, ref = dense(*weights(8, 8), rows=3)
    c = compile_graph(g, jobs=1)
    done = len(lowerings)
    interpreted = compile_graph(g, jobs=1, target="python")  # no vectors: other kernels
    assert len(lowerings) == 2 * done and interpreted.stats.reused == 0
    x = random_array((3, 8))
    np.testing.assert_allclose(interpreted(x), ref(x), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(c(x), ref(x), rtol=RTOL, atol=ATOL)


def test_a_tuned_compile_lowers_every_kernel(lowerings):
    g, ref = dense(*weights())
    compile_graph(g, jobs=1)
    done = len(lowerings)
    cm = compile_graph(g, jobs=1, schedules=lambda key: None)  # a lookup that has no record
    assert len(lowerings) == 2 * done and cm.stats.reused == 0
    check(cm, ref)


def test_threads_compiling_at_once_each_get_their_own_weights(lowerings):
    graphs = [dense(*weights()) for _ in range(4)]
    models, errors = [None] * len(graphs), []

    def work(k: int):
        try:
            models[k] = compile_graph(graphs[k][0], jobs=1)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(graphs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and all(m is not None for m in models)
    for cm, (_, ref) in zip(models, graphs):
        check(cm, ref)


@pytest.fixture
def on_disk(lowerings, monkeypatch, tmp_path):
    """Lowered kernels kept on disk, in a cache folder of this test's own; the lowerings counted."""
    monkeypatch.setenv("EMBER_LOWERED_CACHE", "1")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    return lowerings


def test_another_process_reads_the_kernels_from_the_disk(on_disk):
    (g1, ref1), (g2, ref2) = dense(*weights()), dense(*weights())
    first = compile_graph(g1, jobs=1)
    assert on_disk and first.stats.loaded == 0
    LOWERED.clear()  # as in a new process
    done = len(on_disk)
    second = compile_graph(g2, jobs=1)
    assert len(on_disk) == done and second.stats.loaded == second.stats.lowered == first.stats.lowered
    assert second.stats.reused == 0 and second.source == first.source
    check(second, ref2)
    check(first, ref1)


def test_a_damaged_entry_or_other_code_lowers_anew(on_disk, tmp_path, monkeypatch):
    from ember.runtime import kept

    g, ref = dense(*weights())
    first = compile_graph(g, jobs=1)
    for entry in (tmp_path / "lowered").rglob("*.pkl"):
        entry.write_bytes(entry.read_bytes()[:-7])  # truncated
    LOWERED.clear()
    done = len(on_disk)
    again = compile_graph(g, jobs=1)
    assert len(on_disk) == done + first.stats.lowered and again.stats.loaded == 0
    check(again, ref)
    monkeypatch.setattr(kept, "source_digest", lambda: "another ember")  # an edited or another version
    LOWERED.clear()
    other = compile_graph(g, jobs=1)
    assert len(on_disk) == done + 2 * first.stats.lowered and other.stats.loaded == 0
    check(other, ref)
