"""Saved models and build-cache entries, damaged or edited the ways people damage and edit them:
every load is a named EmberError or the right answer, never a signal, never a wrong answer; and a
library is loaded by its content, never by its path.

Loads of damaged folders run in child processes (one child for many folders): before these
checks, a truncated library killed the process with SIGBUS and an edited manifest made the first
call write out of bounds."""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load, load_file, save, save_file

import ember
from ember.codegen.entry import render_spec
from ember.compiler import compile_graph
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.runtime.build import build_library
from ember.runtime.library import Digest, open_library
from ember.runtime.tensor_file import tensors
from ember.testing import random_array

RTOL, ATOL = 1e-5, 1e-5
WEIGHTS_FILE = "graph/constants.safetensors"
FILES = ("manifest.json", "model.so", "model.c", "graph/graph.json", WEIGHTS_FILE)
FILE_KEYS = {"model.so": "library", "model.c": "source", "graph/graph.json": "graph", WEIGHTS_FILE: "weights"}

# Loads and calls each folder given as [[name, folder], ...] in a JSON file, on the input saved
# as x.npy beside it; prints one JSON line per folder: "ok", "wrong", an EmberError, or another error.
CHILD = """
import json, sys
from pathlib import Path
import numpy as np
import ember
from ember.errors import EmberError

cases = json.loads(Path(sys.argv[1]).read_text())
x = np.load(Path(sys.argv[1]).parent / "x.npy")
expected = np.load(Path(sys.argv[1]).parent / "y.npy")
for name, folder in cases:
    try:
        y = ember.load(folder)(x)
        outcome = {"outcome": "ok" if np.allclose(y, expected, rtol=1e-5, atol=1e-5) else "wrong"}
    except EmberError as e:
        outcome = {"outcome": "error", "type": type(e).__name__, "message": str(e)}
    except Exception as e:
        outcome = {"outcome": "unexpected", "type": type(e).__name__, "message": str(e)}
    print(json.dumps({"case": name, **outcome}), flush=True)
"""


def mlp(hidden: int = 32, scale_op: str = "mul") -> Graph:
    """relu(x @ w1 + b1) @ w2 + b2, then `scale_op` by s: x of shape (n, 16), b2 and s both (8,)."""
    g = Graph("mlp")
    x = g.add_input("x", TensorType(("n", 16)))
    w1, b1 = g.add_constant(random_array((16, hidden)), "w1"), g.add_constant(random_array((hidden,)), "b1")
    w2, b2 = g.add_constant(random_array((hidden, 8)), "w2"), g.add_constant(random_array((8,)), "b2")
    s = g.add_constant(random_array((8,)), "s")
    (h,) = add_op(g, "matmul", [x, w1])
    (h,) = add_op(g, "add", [h, b1])
    (h,) = add_op(g, "relu", [h])
    (y,) = add_op(g, "matmul", [h, w2])
    (y,) = add_op(g, "add", [y, b2])
    g.set_outputs(add_op(g, scale_op, [y, s]))
    return g


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Model A and model B saved (compiled once, in a cache of their own), and A's input and output."""
    root = tmp_path_factory.mktemp("saved")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_CACHE_DIR", str(root / "cache"))
        a = compile_graph(mlp(), name="a")
        b = compile_graph(mlp(hidden=24, scale_op="add"), name="b")
        x = random_array((3, 16))
        np.save(root / "x.npy", x)
        np.save(root / "y.npy", a(x))
        return {"a": a.save(root / "a.ember"), "b": b.save(root / "b.ember"), "root": root, "x": x, "y": a(x),
                "y_b": b(x)}


def run_cases(run_python, folders: dict[str, Path], where: Path, saved) -> dict[str, dict]:
    """Load and call every folder in one child process; the outcome of each (a signal fails)."""
    listing = where / "cases.json"
    listing.write_text(json.dumps([[name, str(f)] for name, f in folders.items()]))
    for name in ("x.npy", "y.npy"):
        shutil.copy(saved["root"] / name, where / name)
    run = run_python(CHILD, args=(str(listing),), timeout=300)
    outcomes = {d["case"]: d for d in map(json.loads, run.stdout.splitlines())}
    assert run.returncode == 0, f"the child died loading case {len(outcomes) + 1} of {len(folders)}:\n{run}"
    return outcomes


# -- editing a folder ----------------------------------------------------------------------
def manifest_of(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def write_manifest(folder: Path, manifest: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(manifest))


def resign(folder: Path, relative: str) -> None:
    """Record a changed file's size and sha256 in the manifest, as someone covering their tracks would."""
    manifest = manifest_of(folder)
    manifest["files"][FILE_KEYS[relative]].update(Digest.of((folder / relative).read_bytes()).to_json())
    write_manifest(folder, manifest)


def truncate(folder: Path, relative: str, fraction: float = 0.5) -> None:
    data = (folder / relative).read_bytes()
    (folder / relative).write_bytes(data[:int(len(data) * fraction)])


def flip(folder: Path, relative: str, flips=((0.5, 0xFF),)) -> None:
    data = bytearray((folder / relative).read_bytes())
    for at, mask in flips:
        data[min(int(at * len(data)), len(data) - 1)] ^= mask
    (folder / relative).write_bytes(bytes(data))


def edit(change):
    def apply(folder: Path, saved) -> None:
        manifest = manifest_of(folder)
        change(manifest)
        write_manifest(folder, manifest)
    return apply


def other_library(folder: Path, saved) -> None:
    shutil.copy(saved["b"] / "model.so", folder / "model.so")


def float64_weights(folder: Path, saved) -> None:
    weights = load_file(folder / WEIGHTS_FILE)
    save_file({k: v.astype(np.float64) for k, v in weights.items()}, folder / WEIGHTS_FILE)
    resign(folder, WEIGHTS_FILE)


def corrupt_weights(folder: Path, saved) -> None:
    flip(folder, WEIGHTS_FILE, ((0.0, 0x7F),))  # the length of its header
    resign(folder, WEIGHTS_FILE)


def not_a_file(relative: str, kind: str):
    """The file replaced by a symlink to /dev/zero (read, it never ends) or by a FIFO (read, it
    waits for a writer): ember.load used to read until memory ran out, or hang."""
    def apply(folder: Path, saved) -> None:
        (folder / relative).unlink()
        if kind == "fifo":
            os.mkfifo(folder / relative)
        else:
            (folder / relative).symlink_to("/dev/zero")
    return apply


def reordered(manifest: dict) -> None:
    w = manifest["weights"]
    w[0], w[1] = w[1], w[0]


# name: (how the folder is damaged, what the error says)
CASES = {
    "truncated library": (lambda f, s: truncate(f, "model.so"), r"model.so has \d+ bytes, .*manifest.json records"),
    "flipped library bytes": (lambda f, s: flip(f, "model.so"), r"model.so has sha256 \w+, .*manifest.json records"),
    "library of another model": (other_library, "model.so has .*manifest.json records"),
    "library of another model, digest updated": (
        lambda f, s: (other_library(f, s), resign(f, "model.so")),
        "the manifest does not describe its library"),
    "edited output shape": (edit(lambda m: m["outputs"][0]["shape"].__setitem__(1, 80)),
                            r"outputs\[0\].shape\[1\] is 80 where the library model.so has 8"),
    "edited input batch": (edit(lambda m: m["inputs"][0]["shape"].__setitem__(0, 64)),
                           r"inputs\[0\].shape\[0\] is 64 where the library model.so has \"n\""),
    "edited workspace": (edit(lambda m: m["workspace"][0]["shape"].__setitem__(-1, 1)),
                         r"workspace\[0\].shape\[1\] is 1 where the library model.so has 32"),
    "shortened weights": (edit(lambda m: m["weights"].pop()), "weights has 4 entries, the library model.so has 5"),
    "reordered weights": (edit(reordered), r"weights\[0\] is \"b1\" where the library model.so has \"w1\""),
    "float64 weights": (float64_weights, "weight 'w1' is float64\\[16, 32\\], the library expects float32\\[16, 32\\]"),
    "truncated weights": (lambda f, s: truncate(f, WEIGHTS_FILE, 0.9), "constants.safetensors has \\d+ bytes"),
    "corrupt weights file": (corrupt_weights, "constants.safetensors is not a safetensors file"),
    "missing manifest key": (edit(lambda m: m.pop("symbols")), r"manifest lacks key\(s\) \['symbols'\]"),
    "extra manifest key": (edit(lambda m: m.update(comment="hi")), r"manifest has unknown key\(s\) \['comment'\]"),
    "wrong manifest type": (edit(lambda m: m["files"]["library"].update(size="big")),
                            r"manifest.files.library.size is \"big\", expected an integer"),
    "file outside the folder": (edit(lambda m: m["files"]["library"].update(path="../b.ember/model.so")),
                                "names the file '../b.ember/model.so', which is not inside"),
    "other ember version": (edit(lambda m: m.update(ember_version="0.9.1")),
                            rf"saved by ember '0.9.1'; this is ember {ember.__version__}"),
    "truncated manifest": (lambda f, s: truncate(f, "manifest.json"), "cannot read manifest.json"),
    "weights linked to /dev/zero": (not_a_file(WEIGHTS_FILE, "zero"), "constants.safetensors is not a regular file"),
    "weights a FIFO": (not_a_file(WEIGHTS_FILE, "fifo"), "constants.safetensors is not a regular file"),
    "library linked to /dev/zero": (not_a_file("model.so", "zero"), "model.so is not a regular file"),
    "manifest a FIFO": (not_a_file("manifest.json", "fifo"), "cannot read manifest.json: .* not a regular file"),
}


def test_damaged_artifacts_are_named_errors(python, saved, tmp_path):
    """Every case of CASES, prepared from model A and loaded in one child: each an ArtifactError
    that says what is wrong; an intact copy loads and runs."""
    folders = {"intact": shutil.copytree(saved["a"], tmp_path / "intact")}
    for k, (name, (damage, _)) in enumerate(CASES.items()):
        folders[name] = shutil.copytree(saved["a"], tmp_path / f"case{k}")
        damage(folders[name], saved)
    outcomes = run_cases(python, folders, tmp_path, saved)
    assert outcomes["intact"]["outcome"] == "ok", outcomes["intact"]
    wrong = {name: got for name, got in outcomes.items() if name != "intact" and not (
        got["outcome"] == "error" and got["type"] == "ArtifactError" and re.search(CASES[name][1], got["message"]))}
    assert not wrong, json.dumps(wrong, indent=1)
    message = outcomes["other ember version"]["message"]
    assert "0.9.1" in message and ember.__version__ in message and "compile the model again" in message


def test_a_folder_saved_over_loads_the_new_model(python, saved, tmp_path):
    """Model A loaded, model B saved in its folder, loaded in the same process: B's call runs B
    (glibc's dlopen would hand back A's library for the same path), A's still runs A, and A's
    graph, read after its folder changed, is refused rather than read from B's files."""
    code = f"""
        import json, shutil, numpy as np, ember
        from ember.errors import ArtifactError
        folder, x = {str(tmp_path / "m")!r}, np.load({str(saved["root"] / "x.npy")!r})
        shutil.copytree({str(saved["a"])!r}, folder)
        a = ember.load(folder)
        ya = a(x)
        shutil.rmtree(folder)
        shutil.copytree({str(saved["b"])!r}, folder)
        b = ember.load(folder)
        try:
            a.graph
            graph = "read"
        except ArtifactError as e:
            graph = str(e)
        print(json.dumps({{"a": ya.tolist(), "b": b(x).tolist(), "a_again": a(x).tolist(), "graph": graph,
                          "same_path": str(a.library_path) == str(b.library_path)}}))
    """
    run = python(code)
    assert run.returncode == 0, str(run)
    got = json.loads(run.stdout)
    np.testing.assert_allclose(got["a"], saved["y"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["b"], saved["y_b"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["a_again"], saved["y"], rtol=RTOL, atol=ATOL)
    assert not got["same_path"]
    assert "graph.json has" in got["graph"] and "manifest.json records" in got["graph"], got["graph"]


def test_a_damaged_build_cache_entry_is_rebuilt(python, cache_dir):
    """A truncated library in the build cache (and a truncated copy among the loaded libraries) is
    compiled (copied) again by the next ember.compile, never dlopened."""
    code = "\n".join([
        "import json, numpy as np, ember",
        "from ember.graph import Graph, TensorType",
        "from ember.ops.nodes import add_op",
        "from ember.testing import random_array",
        inspect.getsource(mlp),
        "g = mlp()",
        "cm = ember.compile(g)",
        "x, c = random_array((2, 16)), g.constants",
        "ref = (np.maximum(x @ c['w1'] + c['b1'], 0) @ c['w2'] + c['b2']) * c['s']",
        "print(json.dumps({'cached': cm.stats.cached, 'error': float(np.abs(cm(x) - ref).max())}))",
    ])
    first = python(code)
    assert first.returncode == 0, str(first)
    (built,) = cache_dir.glob("kernels/*/*.so")
    (copied,) = cache_dir.glob("libraries/*/*.so")
    for lib in (built, copied):
        truncate(lib.parent, lib.name, 0.3)
    again = python(code)
    assert again.returncode == 0, f"compiling over a truncated cache entry:\n{again}"
    got = json.loads(again.stdout)
    assert not got["cached"] and got["error"] < 1e-4
    assert Digest.of(built.read_bytes()).to_json() == json.loads(built.with_suffix(".json").read_text())
    assert copied.read_bytes() == built.read_bytes()
    assert json.loads(python(code).stdout)["cached"]  # intact now: a hit


def test_a_library_without_a_sidecar_is_rebuilt(cache_dir):
    source = "int twice(int x) { return 2 * x; }\n"
    path = build_library(source)
    path.with_suffix(".json").unlink()  # an entry of an older ember
    path.write_bytes(b"\x7fELF garbage")
    assert build_library(source) == path
    assert open_library(path).handle.twice(21) == 42


def test_loaded_libraries_are_named_by_content(saved, cache_dir, tmp_path, monkeypatch):
    """Loading a folder twice shares one copy, named by the sha256 of the library; a cache folder
    that cannot hold the copy is a ConfigError that names the option."""
    first, second = ember.load(saved["a"]), ember.load(saved["a"])
    digest = Digest.of((saved["a"] / "model.so").read_bytes())
    assert first.library_path == second.library_path == cache_dir / "libraries" / digest.value[:2] / \
        f"{digest.value}.so"
    assert len(list(cache_dir.glob("libraries/*/*"))) == 1
    np.testing.assert_allclose(second(saved["x"]), saved["y"], rtol=RTOL, atol=ATOL)
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "file"))
    with pytest.raises(ember.ConfigError, match="EMBER_CACHE_DIR"):
        ember.load(saved["a"])


def test_the_contract_survives_any_text():
    """The spec embedded in a library reads back byte for byte, quotes, backslashes, '?' and
    non-ASCII names included."""
    text = json.dumps({"name": 'a"b\\c??=d\u00e9\u4e2d\n\t', "n": list(range(60))}, ensure_ascii=False)
    lib = open_library(build_library(render_spec(text)))
    lib.handle.ember_model_spec.restype = __import__("ctypes").c_char_p
    assert lib.handle.ember_model_spec().decode() == text


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=4),
                       st.tuples(st.sampled_from(["float32", "float64", "int8", "int64", "bool", "float16"]),
                                 st.lists(st.integers(0, 3), max_size=3)), min_size=1, max_size=4),
       st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), max_size=3),
       st.floats(0, 1))
def test_tensor_file_reads_what_safetensors_wrote_or_says_why(specs, flips, keep):
    """The weights reader (views of the checked bytes): what safetensors wrote reads back equal;
    damaged bytes are a ValueError or tensors that fit their bytes, never another exception."""
    rng = np.random.default_rng(0)
    arrays = {name: np.asarray(rng.random(shape) * 100).astype(dtype) for name, (dtype, shape) in specs.items()}
    data = save(arrays)
    got = tensors(data)
    assert got.keys() == load(data).keys()
    for name, a in arrays.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape
        np.testing.assert_array_equal(got[name], a)
    damaged = bytearray(data[:max(1, int(len(data) * keep))] if keep < 1 else data)
    for at, mask in flips:
        damaged[int(at * len(damaged))] ^= mask
    try:
        for a in tensors(bytes(damaged)).values():
            assert a.nbytes == a.size * a.dtype.itemsize
    except ValueError:
        pass


# -- fuzzing ----------------------------------------------------------------------------------
PER_CHILD = 40
CHILDREN = 5
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-3, 100) | st.text(max_size=6),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=2), max_leaves=4)
MUTATIONS = st.one_of(
    st.tuples(st.just("truncate"), st.sampled_from(FILES), st.floats(0, 1, exclude_max=True), st.booleans()),
    st.tuples(st.just("flip"), st.sampled_from(FILES),
              st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=4),
              st.booleans()),
    st.tuples(st.just("edit"), st.integers(0, 10**6), JSON_VALUES),
    st.tuples(st.just("nudge"), st.integers(0, 10**6), st.integers(-2, 2)),
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("add"), st.integers(0, 10**6), st.text(min_size=1, max_size=5), JSON_VALUES),
    st.tuples(st.just("swap"), st.integers(0, 4), st.integers(0, 4), st.sampled_from(["manifest", "file", "both"])),
)


def places(value, path=()):
    """Every place in a JSON value: the path to it, in a stable order."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from places(v, (*path, k))
    elif isinstance(value, list):
        for k, v in enumerate(value):
            yield from places(v, (*path, k))


def mutate(folder: Path, mutation) -> None:
    """Damage a saved model's folder (see MUTATIONS). Only changes a user cannot make by accident
    and ember cannot tell from the model's own are re-signed: a truncated weights file, an edited
    source or graph (never the library, whose bytes are the code)."""
    kind, *args = mutation
    if kind in ("truncate", "flip"):
        relative, how, sign = args
        truncate(folder, relative, how) if kind == "truncate" else flip(folder, relative, how)
        if sign and relative in ("model.c", "graph/graph.json") or (sign and kind == "truncate"
                                                                     and relative == WEIGHTS_FILE):
            resign(folder, relative)
        return
    manifest = manifest_of(folder)
    if kind == "swap":
        i, j, where = args
        names = manifest["weights"]
        i, j = i % len(names), j % len(names)
        if where in ("manifest", "both"):
            names[i], names[j] = names[j], names[i]
        if where in ("file", "both"):
            weights = load_file(folder / WEIGHTS_FILE)
            a, b = manifest_of(folder)["weights"][i], manifest_of(folder)["weights"][j]
            weights[a], weights[b] = weights[b], weights[a]
            save_file(weights, folder / WEIGHTS_FILE)
    else:
        spots = list(places(manifest))
        path = spots[args[0] % len(spots)]
        parent = manifest
        for step in path[:-1]:
            parent = parent[step]
        if kind == "edit" and path:
            parent[path[-1]] = args[1]
        elif kind == "nudge" and path and isinstance(parent[path[-1]], int) and not isinstance(parent[path[-1]], bool):
            parent[path[-1]] += args[1]
        elif kind == "delete" and path:
            del parent[path[-1]]
        elif kind == "add":
            target = parent[path[-1]] if path else manifest
            if isinstance(target, dict):
                target[args[1]] = args[2]
            elif isinstance(target, list):
                target.append(args[2])
    write_manifest(folder, manifest)


def test_fuzzed_artifacts_are_an_error_or_the_right_answer(python, saved, tmp_path):
    """Random damage (truncation, flipped bytes, edited, nudged, deleted or added manifest fields,
    swapped weights) to a saved model: each load is an EmberError or the right answer."""
    tally: Counter = Counter()
    batches = []

    @settings(max_examples=CHILDREN, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(MUTATIONS, min_size=PER_CHILD, max_size=PER_CHILD))
    def check(mutations):
        where = tmp_path / f"batch{len(batches)}"
        batches.append(where)
        folders = {}
        for k, mutation in enumerate(mutations):
            folders[f"{k}: {mutation!r}"] = folder = shutil.copytree(saved["a"], where / f"case{k}")
            mutate(folder, mutation)
        for name, got in run_cases(python, folders, where, saved).items():
            tally[got["outcome"] if got["outcome"] != "error" else f"error {got['type']}"] += 1
            assert got["outcome"] in ("ok", "error"), f"{name}: {got}"

    check()
    total = sum(tally.values())
    print(f"\nfuzzed artifacts: {total} cases in {len(batches)} children: " +
          ", ".join(f"{n} {outcome}" for outcome, n in tally.most_common()))
    assert total == CHILDREN * PER_CHILD
