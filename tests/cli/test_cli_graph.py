"""`ember graph`: an ONNX model or a saved artifact drawn as SVG and HTML, its kernels marked."""

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from onnx import helper

from ember.cli import main

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def onnx_model(save_onnx):
    """matmul -> add(bias) -> relu -> tanh: one kernel when fused, four when not."""
    w = np.random.rand(8, 4).astype("float32")
    b = np.random.rand(4).astype("float32")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("Tanh", ["r"], ["y"])]
    return save_onnx([2, 8], [2, 4], {"w": w, "b": b}, nodes)


def kernels(svg: str) -> list[list[str]]:
    root = ET.fromstring(svg)
    return [g.get("data-ops").split() for g in root.iter(f"{SVG}g") if g.get("class") == "kernel"]


def test_graph_writes_svg_and_html(onnx_model, tmp_path, capsys):
    svg, page = tmp_path / "g.svg", tmp_path / "g.html"
    assert main(["graph", str(onnx_model), "--svg", str(svg), "--html", str(page), "--opt-level", "3"]) == 0
    assert "wrote" in capsys.readouterr().err
    fused = kernels(svg.read_text())
    assert len(fused) == 1 and fused[0][-2:] == ["relu", "tanh"] and fused[0][0] in ("matmul", "gemm")
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<tr>") == 2 and "<svg" in html


def test_graph_to_stdout_at_level_0_and_of_an_artifact(onnx_model, tmp_path, capsys):
    assert main(["graph", str(onnx_model), "--opt-level", "0"]) == 0
    assert len(kernels(capsys.readouterr().out)) == 4
    art = tmp_path / "model.ember"
    assert main(["compile", str(onnx_model), "-o", str(art)]) == 0
    capsys.readouterr()
    assert main(["graph", str(art)]) == 0  # the artifact's graph, drawn at the highest level: fused
    assert len(kernels(capsys.readouterr().out)) == 1


def test_graph_names_a_bad_level_and_a_bad_file(onnx_model, tmp_path):
    with pytest.raises(SystemExit, match="--opt-level must be one of"):
        main(["graph", str(onnx_model), "--opt-level", "9"])
    with pytest.raises(SystemExit, match="expected an .onnx file"):
        main(["graph", str(tmp_path / "model.txt")])
