"""The compile report (CompileStats.report): every phase's seconds, what the caches gave;
`ember.compile(..., report=True)` prints it, `compile_report()` returns it."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.testing import random_array

PHASES = ("import", "passes", "lowering", "codegen", "C compiler", "load")


def seconds(report: str) -> dict[str, float]:
    """Each phase's seconds, as the report's rows give them."""
    return {name: float(s) for name, s in re.findall(r"^  (\S+(?: compiler)?) +(\d+\.\d+) s", report, re.M)}


def test_an_onnx_model_reports_every_phase(capsys):
    pytest.importorskip("onnx")
    import onnx.numpy_helper
    import onnx.parser

    w = random_array((16, 8))
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        mlp (float[4, 16] x) => (float[4, 8] y) { h = MatMul(x, w)  y = Relu(h) }""")
    model.graph.initializer.append(onnx.numpy_helper.from_array(w, "w"))
    cm = ember.compile(model, report=True, name="mlp")
    printed = capsys.readouterr().err
    assert printed.strip() == cm.compile_report()
    got = seconds(printed)
    assert list(got) == list(PHASES), printed
    stats = cm.stats
    assert stats.import_s > 0 and stats.total_s >= stats.import_s + stats.lower_s + stats.build_s
    assert printed.startswith(f"mlp: compiled in {stats.total_s:.2f} s")
    slowest = re.search(r"slowest: (.*)", printed).group(1)
    assert f"{stats.lowered} workloads" in printed and stats.passes
    assert all(f"{r.name} {r.seconds:.2f} s" in slowest for r in sorted(stats.passes, key=lambda r: -r.seconds)[:3])
    x = random_array((4, 16))
    np.testing.assert_allclose(cm(x), np.maximum(x.astype(np.float64) @ w, 0), rtol=1e-5, atol=1e-5)


def test_a_graph_compiled_again_reports_the_caches():
    g = Graph("scale")
    x = g.add_input("x", TensorType((8, 8)))
    g.set_outputs(add_op(g, "mul", [x, g.add_constant(random_array((8, 8)), "w")]))
    ember.compile(g)
    again = ember.compile(g)
    report = again.compile_report()
    assert seconds(report)["import"] == 0 and "a graph: nothing imported" in report
    assert "build cache hit" in report and f"{again.stats.lowered} reused from this process" in report
    w = g.constants["w"]
    data = random_array((8, 8))
    np.testing.assert_allclose(again(data), data * w, rtol=1e-6)


def test_a_loaded_model_has_no_report(tmp_path):
    g = Graph("neg")
    x = g.add_input("x", TensorType((4,)))
    g.set_outputs(add_op(g, "neg", [x]))
    ember.compile(g).save(tmp_path / "neg")
    assert "loaded, not compiled" in ember.load(tmp_path / "neg").compile_report()
