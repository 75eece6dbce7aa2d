"""Graphs saved to a folder (JSON structure + safetensors constants) and to bytes: the same text
back, and constants of every dtype bit for bit; damaged bytes and files are a GraphError."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.graph import (
    Graph,
    GraphError,
    TensorType,
    graph_from_bytes,
    graph_to_bytes,
    graph_to_text,
    load_graph,
    save_graph,
)
from ember.graph.serialize import CONSTANTS_FILE, GRAPH_FILE
from ember.testing import random_array

RNG = np.random.default_rng()
DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint64", "float16", "float32", "float64"]


def graph_with_constants() -> Graph:
    g = Graph("saved")
    x = g.add_input("x", TensorType(("batch", 3)))
    consts = [g.add_constant(random_array((2, 3), dtype), f"c_{dtype}") for dtype in DTYPES]
    consts.append(g.add_constant(np.float32(0.25), "scalar"))
    consts.append(g.add_constant(np.zeros((0, 3), "float32"), "empty"))
    consts.append(g.add_constant(np.asfortranarray(random_array((3, 4))), "/onnx/name:0"))
    (y,) = g.add_node("add", [x, consts[8]], {}, [TensorType(("batch", 3))]).outputs
    g.add_node("split", [y], {"axis": 1, "sizes": (1, 2), "eps": 1e-5, "mode": "a b"},
               [TensorType(("batch", 1)), TensorType(("batch", 2))], out_names=["lo", "hi"])
    g.set_outputs([g.value("hi"), *consts])
    return g


def assert_same(back: Graph, g: Graph) -> None:
    assert graph_to_text(back, max_inline=0) == graph_to_text(g, max_inline=0)
    assert list(back.constants) == list(g.constants)
    for name, data in g.constants.items():
        got = back.constants[name]
        assert (got.dtype, got.shape) == (data.dtype, data.shape), name
        assert got.tobytes() == np.ascontiguousarray(data).tobytes(), name


def test_folder_round_trip(tmp_path):
    g = graph_with_constants()
    folder = save_graph(g, tmp_path / "model")
    assert sorted(p.name for p in folder.iterdir()) == [CONSTANTS_FILE, GRAPH_FILE]
    manifest = json.loads((folder / GRAPH_FILE).read_text())
    assert manifest["graph"][0] == 'graph saved(%x: float32[batch, 3]) {'
    assert "  const %c_float32: float32[2, 3]" in manifest["graph"]  # no data in the text, even small
    assert_same(load_graph(folder), g)


def test_bytes_round_trip():
    g = graph_with_constants()
    assert_same(graph_from_bytes(graph_to_bytes(g)), g)


def test_graph_without_constants(tmp_path):
    g = Graph()
    x = g.add_input("x", TensorType((2,)))
    g.set_outputs([x])
    assert_same(load_graph(save_graph(g, tmp_path)), g)
    assert_same(graph_from_bytes(graph_to_bytes(g)), g)


def test_load_errors(tmp_path):
    with pytest.raises(GraphError, match="holds no saved graph"):
        load_graph(tmp_path / "nothing")
    (tmp_path / GRAPH_FILE).write_text(json.dumps({"format": "other", "version": 1}))
    with pytest.raises(GraphError, match="is not an ember.graph file of version 1"):
        load_graph(tmp_path)
    with pytest.raises(GraphError, match="not a saved graph"):
        graph_from_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00junk!")
    with pytest.raises(GraphError, match="not an ember.graph blob"):
        graph_from_bytes(graph_to_bytes(Graph())[:8] + b"{}" + b" " * 100)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_damaged_bytes_are_a_graph_error(data):
    """A saved graph's bytes cut short, with a byte flipped or replaced: a GraphError, never
    another graph (a damaged constant's data read as other values before the blob held its sha256;
    only the version "2" replaced by "1" reads the same graph back, its digests checked). A
    header that missed a field or did not cover the data was safetensors' own SafetensorError,
    metadata without its text a KeyError."""
    original = graph_with_constants()
    blob = bytearray(graph_to_bytes(original))
    at = data.draw(st.integers(0, len(blob) - 1))
    how = data.draw(st.sampled_from(["cut", "flip", "replace"]))
    if how == "cut":
        del blob[at:]
    elif how == "flip":
        blob[at] ^= 1 << data.draw(st.integers(0, 7))
    else:
        blob[at] = data.draw(st.integers(32, 126))
    try:
        g = graph_from_bytes(bytes(blob))
    except GraphError as e:
        assert any(s in str(e) for s in ("saved graph", "ember.graph", "line", "blob is damaged", "sha256")), str(e)
    else:
        assert_same(g, original)


def test_a_damaged_constant_or_text_is_named():
    g = graph_with_constants()
    blob = graph_to_bytes(g)
    data = g.constants["c_float32"].tobytes()
    at = blob.index(data) + int(RNG.integers(len(data)))
    damaged = bytearray(blob)
    damaged[at] ^= 1 << int(RNG.integers(8))
    with pytest.raises(GraphError, match=r"the blob is damaged: constant 'c_float32' \(float32 \(2, 3\)\) does not "
                                         r"match the sha256 recorded for it"):
        graph_from_bytes(bytes(damaged))
    at = blob.index(b"%hi: float32") + 1  # (the text: a value renamed keeps the JSON valid)
    with pytest.raises(GraphError, match="the blob is damaged: its graph text does not match the sha256"):
        graph_from_bytes(blob[:at] + b"H" + blob[at + 1:])


def test_a_blob_of_version_1_reads_unchecked_and_2_needs_its_digests():
    """Version 1 (before the digests) is read as it was; a version 2 blob without its sha256
    record is refused, not read unchecked."""
    from safetensors.numpy import save

    g = graph_with_constants()
    tensors = {k: np.asarray(a, order="C") for k, a in g.all_constants()}
    text = graph_to_text(g, max_inline=0)
    assert_same(graph_from_bytes(save(tensors, metadata={"format": "ember.graph", "version": "1", "graph": text})), g)
    with pytest.raises(GraphError, match="not a saved graph: 'sha256'"):
        graph_from_bytes(save(tensors, metadata={"format": "ember.graph", "version": "2", "graph": text}))
    with pytest.raises(GraphError, match="not an ember.graph blob of version 1 or 2"):
        graph_from_bytes(save(tensors, metadata={"format": "ember.graph", "version": "3", "graph": text}))


def test_a_folder_of_damaged_constants_is_a_graph_error(tmp_path):
    save_graph(graph_with_constants(), tmp_path)
    data = (tmp_path / CONSTANTS_FILE).read_bytes()
    (tmp_path / CONSTANTS_FILE).write_bytes(data[:100])
    with pytest.raises(GraphError, match="constants.safetensors: the constants of the saved graph cannot be read"):
        load_graph(tmp_path)
    (tmp_path / CONSTANTS_FILE).unlink()
    with pytest.raises(GraphError, match="holds no constants of its saved graph"):
        load_graph(tmp_path)
    (tmp_path / GRAPH_FILE).write_text(json.dumps({"format": "ember.graph", "version": 1}))
    with pytest.raises(GraphError, match="is not an ember.graph file of version 1"):
        load_graph(tmp_path)  # (no "graph": a KeyError)
