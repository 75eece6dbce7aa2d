"""The pass pipeline: levels, reports (timings, node counts, changed), IR printing, disabled
passes, the environment overrides, unknown names, and the verifier catching a broken pass."""

import numpy as np
import pytest
from pass_check import check_same, ops

import ember
from ember.errors import ConfigError
from ember.graph import Graph, GraphError, TensorType
from ember.ops.nodes import add_op
from ember.passes.pipeline import PASSES, PIPELINES, PassReport, run_pipeline


def _graph():
    """Something for every level-2 pass: a foldable constant, x * 1, a duplicate, conv + bn, a dead node."""
    rng = np.random.default_rng()
    g = Graph()
    x = g.add_input("x", TensorType((1, 2, 5, 5)))
    w, = add_op(g, "neg", [g.add_constant(rng.standard_normal((3, 2, 3, 3)).astype("float32"), "w")])
    one = g.add_constant(np.ones((5,), "float32"), "one")
    x1, = add_op(g, "mul", [x, one])
    c, = add_op(g, "conv2d", [x1, w], {"padding": (1, 1, 1, 1)})
    params = [g.add_constant(v, n) for v, n in [(rng.standard_normal(3).astype("float32"), "mean"),
                                                (rng.random(3).astype("float32") + 0.5, "var"),
                                                (rng.standard_normal(3).astype("float32"), "gamma"),
                                                (rng.standard_normal(3).astype("float32"), "beta")]]
    b, = add_op(g, "batch_norm", [c, *params])
    r1, = add_op(g, "relu", [b])
    r2, = add_op(g, "relu", [b])
    add_op(g, "exp", [r1])  # dead
    y, = add_op(g, "add", [r1, r2])
    g.set_outputs([y])
    return g


def test_levels_and_report():
    g = _graph()
    assert run_pipeline(g, 0) is g
    report = []
    out = run_pipeline(g, 2, report=report)
    assert ops(out) == ["conv2d", "relu", "add"]
    check_same(g, out, rtol=1e-4, atol=1e-5)
    assert [r.name for r in report] == PIPELINES[2]
    assert all(isinstance(r, PassReport) and r.seconds >= 0 for r in report)
    assert all(a.nodes_after == b.nodes_before for a, b in zip(report, report[1:]))
    assert report[0].nodes_before == len(g.nodes) and report[-1].nodes_after == len(out.nodes)
    # no attention (and a CPU target, which keeps it fused), no tap reading padding alone, no sibling
    # products, no product of a weight matrix, no GEMV; an isolated conv keeps the plain layout, its
    # weights packed (and the passes after drop the unpacked ones)
    assert [r.name for r in report if not r.changed] == ["fold_attention", "fold_repeat_kv", "unfold_attention",
                                                         "fold_cache_append", "kv_cache",
                                                         "slice_products", "trim_taps", "split_taps", "nest_concats",
                                                         "fuse_siblings", "fold_qkv_split", "flatten_products",
                                                         "quantize_weights", "quantize_rows", "nbits_epilogues",
                                                         "pad_gemv", "split_k",
                                                         "split_reduce", "layout",
                                                         "winograd", "gather_patches"]
    assert set(PIPELINES[3]) <= set(PASSES) and PIPELINES[0] == []


def test_unchanged_is_reported():
    g = Graph()
    x = g.add_input("x", TensorType((3,)))
    g.set_outputs(add_op(g, "exp", [x]))
    report = []
    assert run_pipeline(g, 2, report=report) is g  # nothing changed: the graph itself
    assert not any(r.changed for r in report) and "unchanged" in str(report[0])


def test_print_ir(capsys):
    g = _graph()
    run_pipeline(g, 2, print_ir="cse")
    err = capsys.readouterr().err
    assert err.startswith("# after cse (") and err.count("# after") == 1 and "conv2d" in err
    run_pipeline(g, 2, print_ir=["fold_constants", "dce"])
    assert capsys.readouterr().err.count("# after") == 3  # fold_constants runs twice
    run_pipeline(g, 2, print_ir="all")
    assert capsys.readouterr().err.count("# after") == len(PIPELINES[2])
    small = Graph()
    x = small.add_input("x", TensorType((3,)))
    small.set_outputs(add_op(small, "exp", [x]))
    run_pipeline(small, 1, print_ir="dce")
    assert capsys.readouterr().err.startswith("# after dce (unchanged)\n")


def test_disabled_passes():
    g = _graph()
    report = []
    out = run_pipeline(g, 2, disabled_passes=["fold_batch_norm", "dce"], report=report)
    assert "batch_norm" in ops(out) and "exp" in ops(out)
    assert [r.name for r in report] == ["fold_constants", "fold_attention", "fold_repeat_kv", "unfold_attention",
                                        "fold_transposes", "simplify", "fold_cache_append", "kv_cache", "cse",
                                        "slice_products", "trim_taps", "split_taps", "nest_concats", "fuse_siblings",
                                        "fold_qkv_split",
                                        "flatten_products", "quantize_weights", "quantize_rows", "nbits_epilogues",
                                        "pad_gemv", "split_k",
                                        "split_reduce", "layout",
                                        "pack_weights",
                                        "fold_constants", "winograd", "gather_patches"]
    check_same(g, out)


def test_environment_overrides(monkeypatch, capsys):
    g = _graph()
    monkeypatch.setenv("EMBER_DISABLE_PASSES", "fold_batch_norm, cse")
    monkeypatch.setenv("EMBER_PRINT_IR", "simplify,dce")
    report = []
    run_pipeline(g, 2, report=report)
    assert [r.name for r in report] == ["fold_constants", "fold_attention", "fold_repeat_kv", "unfold_attention",
                                        "fold_transposes", "simplify", "fold_cache_append", "kv_cache",
                                        "slice_products", "trim_taps", "split_taps", "nest_concats", "fuse_siblings",
                                        "fold_qkv_split",
                                        "flatten_products", "quantize_weights", "quantize_rows", "nbits_epilogues",
                                        "pad_gemv", "split_k",
                                        "split_reduce", "layout",
                                        "pack_weights",
                                        "fold_constants", "winograd", "gather_patches", "dce"]
    assert capsys.readouterr().err.count("# after") == 2
    run_pipeline(g, 2, print_ir="fold_constants")  # an argument beats the variable (it runs twice)
    assert capsys.readouterr().err.count("# after") == 2


def test_unknown_names():
    g = _graph()
    with pytest.raises(ConfigError, match=r"disabled_passes=\['fuze'\] \(keyword argument\): unknown pass\(es\) "
                                          r"\['fuze'\]; allowed: comma-separated names from: fold_constants, "
                                          r"fold_attention, fold_repeat_kv, unfold_attention, fold_transposes, "
                                          r"simplify"):
        run_pipeline(g, 2, disabled_passes=["fuze"])
    with pytest.raises(ConfigError, match=r"print_ir='nope' \(keyword argument\): unknown"):
        run_pipeline(g, 2, print_ir="nope")
    with pytest.raises(ValueError, match="opt_level"):
        run_pipeline(g, 7)


def test_verifier_catches_a_broken_pass(monkeypatch):
    def broken(graph: Graph) -> Graph:
        """Gives the last node an output type its operator does not infer."""
        v = graph.nodes[-1].outputs[0]
        v.type = TensorType((*v.shape, 1), v.dtype)
        return graph

    monkeypatch.setitem(PASSES, "simplify", broken)
    monkeypatch.delenv("EMBER_DEBUG", raising=False)
    run_pipeline(_graph(), 2)  # unnoticed without debug
    with pytest.raises(GraphError, match=r"after pass simplify: graph main: 1 problem\(s\):\n.*%add"):
        run_pipeline(_graph(), 2, debug=True)
    monkeypatch.setenv("EMBER_DEBUG", "1")  # debug=None: the option decides
    with pytest.raises(GraphError, match=r"after pass simplify: graph main: 1 problem\(s\):\n.*%add"):
        run_pipeline(_graph(), 2)
    run_pipeline(_graph(), 2, debug=False)  # an explicit keyword wins


def test_compile_runs_the_pipeline(capsys):
    g = _graph()
    x = np.random.default_rng().standard_normal((1, 2, 5, 5)).astype("float32")
    plain = ember.compile(g, opt_level=0)
    assert plain.stats.passes == () and plain.stats.nodes == len(g.nodes)
    cm = ember.compile(g, disabled_passes=["cse"], print_ir="dce")
    assert [r.name for r in cm.stats.passes] == ["fold_constants", "fold_attention", "fold_repeat_kv",
                                                 "unfold_attention", "fold_transposes", "simplify", "fold_cache_append",
                                                 "kv_cache",
                                                 "slice_products",
                                                 "fold_batch_norm", "trim_taps", "split_taps", "nest_concats",
                                                 "fuse_siblings", "fold_qkv_split", "flatten_products",
                                                 "quantize_weights", "quantize_rows", "nbits_epilogues",
                                                 "pad_gemv", "split_k",
                                                 "split_reduce", "layout",
                                                 "pack_weights",
                                                 "fold_constants", "winograd", "gather_patches", "dce"]
    assert ops(cm.graph) == ["conv2d", "relu", "relu", "add"] and cm.stats.nodes == 4
    assert capsys.readouterr().err.startswith("# after dce (")
    np.testing.assert_allclose(cm(x), plain(x), rtol=1e-4, atol=1e-5)


def test_config_knows_every_pass_by_name():
    """EMBER_PRINT_IR / EMBER_DISABLE_PASSES are checked against config.GRAPH_PASSES (the ground
    layer imports no pass): it names the pipeline's passes, in order."""
    from ember import config
    from ember.passes.pipeline import LATE_PASSES, PASSES

    assert (*PASSES, *LATE_PASSES) == config.GRAPH_PASSES
