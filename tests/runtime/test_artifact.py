"""Saved models: the artifact folder's contents, loading without tracing, lowering or compiling
(with an empty build cache), and the errors of folders that are not loadable models."""

from __future__ import annotations

import json
import os
import platform
import shutil
import weakref

import numpy as np
import pytest

import ember
from ember.compiler import compile_graph
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.runtime import disk_cache, fastcall, library
from ember.runtime.artifact import ArtifactError
from ember.runtime.library import Digest, map_regular
from ember.runtime.model import CompiledModel
from ember.testing import random_array

RTOL, ATOL = 1e-6, 1e-6


def small_model() -> tuple[Graph, object]:
    """y = (x + w) * x with a weight w of shape (8,) and x of shape (n, 8); and its reference."""
    g = Graph("small")
    x = g.add_input("x", TensorType(("n", 8)))
    w = g.add_constant(random_array((8,)), "w")
    (s,) = add_op(g, "add", [x, w])
    g.set_outputs(add_op(g, "mul", [s, x]))
    return g, lambda x: (x + g.constants["w"]) * x


def test_save_then_load_compiles_nothing(tmp_path, cache_dir, monkeypatch):
    g, ref = small_model()
    cm = compile_graph(g, name="small")
    path = cm.save(tmp_path / "small.ember")
    assert {p.name for p in path.iterdir()} == {"manifest.json", "model.so", "model.c", "graph"}
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["ember_version"] == ember.__version__
    assert manifest["inputs"] == [{"name": "x", "shape": ["n", 8], "dtype": "float32"}]
    assert manifest["outputs"] == [{"name": "mul", "shape": ["n", 8], "dtype": "float32"}]
    assert [k["ops"] for k in manifest["kernels"]] == [["add", "mul"]]
    assert manifest["target"]["machine"] == platform.machine()
    assert manifest["files"]["library"] == {"path": "model.so", **Digest.of((path / "model.so").read_bytes()).to_json()}

    fastcall.extension()  # ember's own call extension (once per process, for every model) is no part of it
    shutil.rmtree(cache_dir)  # the artifact stands alone

    def forbidden(*args, **kwargs):
        raise AssertionError("loading traced, lowered or compiled something")

    for target in ("ember.compiler.compile_graph", "ember.lowering.lower_workload", "ember.lowering.group_kernel",
                   "ember.backends.c.build_library", "ember.runtime.build._compile", "ember.kernel.lower"):
        monkeypatch.setattr(target, forbidden)
    loaded = ember.load(path)
    assert isinstance(loaded, CompiledModel) and loaded.name == "small"
    assert loaded.kernels == cm.kernels and loaded.source == cm.source
    for n in (1, 5):
        x = random_array((n, 8))
        np.testing.assert_allclose(loaded(x), ref(x), rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(loaded(x), cm(x))
    assert str(loaded.graph) == str(g)  # read back on first use


@pytest.mark.parametrize("how", ["by hand", "by a trim"])
def test_a_model_whose_library_left_the_cache_runs_and_saves(tmp_path, cache_dir, monkeypatch, how):
    """The library's copy removed while the model is loaded (its cache's least recently used entry,
    trimmed by another process past EMBER_CACHE_LIMIT, or by hand): the model runs its mapped copy
    and saves the bytes it loaded (the copy kept open), written back to the cache; a save raised
    an ArtifactError."""
    g, ref = small_model()
    cm = compile_graph(g, name="small")
    if how == "by hand":
        cm.library.path.unlink()
    else:
        monkeypatch.setattr(disk_cache, "YOUNG_S", -1.0)
        disk_cache.trim(disk_cache.root("libraries"), 0, low_water=0.0)
    assert not cm.library.path.exists()
    x = random_array((3, 8))
    np.testing.assert_allclose(cm(x), ref(x), rtol=RTOL, atol=ATOL)
    loaded = ember.load(cm.save(tmp_path / "small.ember"))
    assert cm.library.path.is_file() and Digest.of(cm.library.path.read_bytes()) == cm.library.digest
    np.testing.assert_array_equal(loaded(x), cm(x))


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_many_loaded_models_keep_few_descriptors(tmp_path, cache_dir):
    """300 loads of one saved model share one descriptor of their library's copy, where each kept
    its own (a process loading a thousand models ran out of descriptors); files mapped (the model
    cache's weights) keep none, where Python's mmap kept a duplicate each."""
    g, ref = small_model()
    path = compile_graph(g, name="small").save(tmp_path / "small.ember")
    before = fds()
    models = [ember.load(path) for _ in range(300)]
    assert fds() <= before + 2
    x = random_array((3, 8))
    np.testing.assert_allclose(models[-1](x), ref(x), rtol=RTOL, atol=ATOL)
    data = (path / "model.so").read_bytes()
    maps = [map_regular(path / "model.so", len(data), "the test") for _ in range(300)]
    assert fds() <= before + 2 and all(m.tobytes() == data for m in maps[::50])
    with pytest.raises(ValueError):
        maps[0].flags.writeable = True  # (its pages are read-only)


def test_past_kept_max_a_library_keeps_no_descriptor(tmp_path, cache_dir, monkeypatch):
    """Past KEPT_MAX libraries kept open, one loaded keeps none: it runs, and a save once its copy
    left the cache is an ArtifactError that says why; the same library loaded again shares the
    descriptor kept for it."""
    monkeypatch.setattr(library, "_KEPT", weakref.WeakValueDictionary())
    monkeypatch.setattr(library, "KEPT_MAX", 1)
    g, ref = small_model()
    first = compile_graph(g, name="small")
    other = Graph("other")
    other.set_outputs(add_op(other, "relu", [other.add_input("x", TensorType((3, 8)))]))
    second = compile_graph(other)
    assert first.library.kept is not None and second.library.kept is None
    assert compile_graph(g, name="small").library.kept is first.library.kept
    second.library.path.unlink()
    x = random_array((3, 8))
    np.testing.assert_array_equal(second(x), np.maximum(x, 0))
    with pytest.raises(ArtifactError, match=r"left the cache folder, and this process kept no copy of it \(more than 1 "
                                            r"libraries were loaded at once\): compile the model again to save it"):
        second.save(tmp_path / "other.ember")


def test_model_without_graph_keeps_weights_apart(tmp_path):
    g, ref = small_model()
    cm = compile_graph(g)
    bare = CompiledModel(cm.spec, cm.library_path, cm.weights, cm.plan)
    path = bare.save(tmp_path / "bare")
    assert (path / "weights.safetensors").is_file() and not (path / "graph").exists()
    loaded = ember.load(path)
    assert loaded.graph is None and loaded.source is None
    x = random_array((3, 8))
    np.testing.assert_allclose(loaded(x), ref(x), rtol=RTOL, atol=ATOL)


def test_save_over_a_saved_model(tmp_path):
    g, ref = small_model()
    path = compile_graph(g).save(tmp_path / "m")
    loaded = ember.load(path)
    loaded.save(path)  # its own library, graph and weights, written back in place
    x = random_array((2, 8))
    np.testing.assert_allclose(ember.load(path)(x), ref(x), rtol=RTOL, atol=ATOL)


def test_not_a_model(tmp_path):
    with pytest.raises(ArtifactError, match="is not a saved ember model: cannot read manifest.json"):
        ember.load(tmp_path / "nothing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArtifactError, match="it is a file"):
        compile_graph(small_model()[0]).save(tmp_path / "file")


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(format="other"), r"is not an ember.model manifest \(format 'other'\)"),
    (lambda m: m.update(version=1), "has artifact format version 1 .* reads version 2"),
    (lambda m: m["target"].update(machine="pdp11"), "was built for pdp11; this machine is"),
    (lambda m: m["target"].update(features=["warp-drive"]), "with warp-drive, which this one lacks"),
    (lambda m: m["target"].update(align=None), "alignment None is not a power of two"),
    (lambda m: m["target"].update(align=48), "alignment 48 is not a power of two"),
    (lambda m: m["weights"].append("ghost"), "weights has 2 entries, the library model.so has 1"),
    (lambda m: m["files"]["library"].update(path="gone.so"), "cannot read .*gone.so"),
])
def test_broken_artifacts(tmp_path, change, message):
    path = compile_graph(small_model()[0]).save(tmp_path / "m")
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=message):
        ember.load(path)


@pytest.mark.parametrize("size", [0, 1, 4099])
def test_a_files_digest_through_its_pages_is_its_bytes_digest(tmp_path, size):
    path = tmp_path / "data.bin"
    path.write_bytes(np.random.default_rng().integers(0, 256, size, dtype=np.uint8).tobytes())
    assert Digest.of_file(path) == Digest.of(path.read_bytes())
