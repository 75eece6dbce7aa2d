"""A compiled model on disk: a folder that loads without tracing or compiling anything, and whose
files are checked before any of them is trusted.

    model.ember/
      manifest.json              format, ember version, name, inputs, outputs (names, shapes,
                                 dtypes), symbols, weights, kernels, target, workspace plan, and
                                 the path, size and sha256 of each file below (xxh3-128 for
                                 the weights of the model cache's entries: save_artifact)
      model.so                   the shared library (the entry function, every kernel, and the
                                 contract: what it expects, ember.runtime.contract)
      model.c                    its C source, for reading and debugging
      graph/graph.json           the graph IR it was compiled from (ember.graph.serialize) ...
      graph/constants.safetensors  ... whose constants are the weights

A model without its graph keeps its weights in weights.safetensors instead. `save_artifact`
writes the folder (files replaced one by one with `os.replace`, the manifest last, so a save cut
short leaves files its manifest does not match: refused, never half-loaded). `read_artifact`
reads it back into an `Artifact`, from which ember.load builds the CompiledModel. It checks, in
this order, and the first problem is an ArtifactError that names the file and what is wrong:

1. the manifest is JSON of this format and version, saved by a compatible ember (below), and
   fits SCHEMA exactly: every key present with its type, none extra;
2. the library was built for this machine's architecture, with instruction-set extensions it has
   (/proc/cpuinfo): those of the target's features (ember.target) that its code needs, read from
   the library at save (isa.py: the -march's, less the units' extensions, VNNI, AVX512-BF16,
   AVX512-FP16 and AMX, whose instructions it does not contain; a loaded model's spec has these),
   and for an alignment that is a power of two of at most 4096 bytes;
3. each file has the size and sha256 the manifest records (a truncated, edited or swapped file),
   checked on the very bytes that are then used (read once);
4. the library, dlopened by its content (ember.runtime.library), embeds a contract equal to the
   manifest's inputs, outputs, symbols, weight order, kernels and workspace plan: the manifest
   cannot tell the runtime sizes the code was not compiled for;
5. each weight has the dtype and shape of the contract, checked before it is copied.

The graph is read on first use, after its files are checked again.

Compatibility: a folder loads when its format version is VERSION and the ember that saved it
has this ember's major.minor version (0.1.0 loads what 0.1.3 saved): the entry function's
arguments and the contract may change between minor versions, never between patch versions.
Anything else is refused with both versions named: compile the model again.

The price of the checks is one read and one sha256 pass over each file: about 1 ms per MB on an
idle core with SHA-NI (ResNet-18's 47 MB of weights: ~40 ms), most of what a load takes. The
weights file is read into a buffer placed so that its data starts aligned, and the model takes
each weight at an aligned offset as it is (a view of that read-only buffer), copying only the others.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
from safetensors.numpy import save

from ..errors import ArtifactError
from ..target import Target, machine_features
from .contract import read_contract
from .isa import needed_features
from .library import Digest, Library, map_regular, open_library, read_checked, read_regular, write_atomic
from .spec import ModelSpec
from .tensor_file import tensors

FORMAT = "ember.model"
VERSION = 2
MANIFEST = "manifest.json"
LIBRARY = "model.so"
SOURCE = "model.c"
GRAPH = "graph"
WEIGHTS = "weights.safetensors"

# The manifest, exactly (see `_check`): a type; None for null; (a, b) for either; [s] for a list
# of s; {key: s} for an object with exactly these keys ("key?" may be absent; "*" any other key).
TENSOR = {"name": str, "shape": [(int, str)], "dtype": str}
FILE = {"path": str, "size": int, "sha256?": str, "xxh3_128?": str}  # one hash (library.Digest.from_json)
SCHEMA = {
    "format": str, "version": int, "ember_version": str, "name": str,
    "inputs": [TENSOR], "outputs": [TENSOR], "symbols": [str], "weights": [str],
    "kernels": [{"name": str, "ops": [str], "nodes": [str]}],
    "target": {"machine": str, "*": (str, int, float, bool, None, [str])},
    "workspace": [{"name": str, "shape": [(int, str)], "dtype": str, "first": int, "last": int, "shares?": str,
                   "at?": int}],
    "files": {"library": FILE, "source": (None, FILE), "weights": FILE, "graph": (None, FILE)},
    "ranges?": {"*": [(int, None)]},  # symbol -> [min, max or null], checked at each call
}
AGREED = ("inputs", "outputs", "symbols", "kernels", "workspace")  # as in the contract (and "weights")


@dataclass(frozen=True)
class Artifact:
    folder: Path
    manifest: dict
    spec: ModelSpec
    library: Library
    weights: dict[str, np.ndarray]
    workspace: list  # the memory plan as JSON (ember.passes.plan_memory.MemoryPlan.to_json)
    source: str | None

    @property
    def has_graph(self) -> bool:
        return self.manifest["files"]["graph"] is not None

    def read_graph(self):
        """The graph it was compiled from, after checking its files again (they may have been
        replaced since the model was loaded)."""
        from ..graph.serialize import load_graph

        files = self.manifest["files"]
        for key in ("graph", "weights"):
            where = str(self.folder / MANIFEST)
            read_checked(_path(self.folder, files[key]["path"]), _digest(files[key], where), where)
        return load_graph(_path(self.folder, files["graph"]["path"]).parent)


def save_artifact(model, path: str | Path, needed_only: bool = True, weights_hash: str = "sha256") -> Path:
    """Write the artifact folder of `model` (a CompiledModel, ember.runtime.model: this module is
    below it, which saves itself through here). needed_only: the manifest's target lists the CPU
    extensions the library's code uses (isa.py reads them from its instructions, a fraction of a
    second), else all its target has (the model cache's entries, read back only by machines whose
    target is in their key). weights_hash: the weights file's (library.HASHES; the model cache's
    entries are hashed by xxh3-128 where it is installed, 15 times faster than sha256)."""
    from ..version import __version__

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ArtifactError(f"cannot save the model to {folder}: it is a file")
    folder.mkdir(parents=True, exist_ok=True)
    library = read_checked(model.library.on_disk(), model.library.digest, "the model that loaded it")
    files = {"library": _write(folder, LIBRARY, library),
             "source": _write(folder, SOURCE, model.source.encode()) if model.source is not None else None}
    graph = model.graph
    if graph is not None:
        from ..graph.serialize import CONSTANTS_FILE, GRAPH_FILE, save_graph

        save_graph(graph, folder / GRAPH)
        files["weights"] = _entry(folder, f"{GRAPH}/{CONSTANTS_FILE}", weights_hash)
        files["graph"] = _entry(folder, f"{GRAPH}/{GRAPH_FILE}")
    else:
        files["weights"] = _write(folder, WEIGHTS, save({k: np.ascontiguousarray(v) for k, v in model.weights.items()}),
                                  weights_hash)
        files["graph"] = None
    spec = model.spec.to_json()
    if needed_only and "features" in spec["target"]:  # (those its code needs, not all that its -march enables: isa.py)
        spec["target"] = {**spec["target"], "features": needed_features(model.library.path,
                                                                         spec["target"]["features"])}
    manifest = {
        "format": FORMAT, "version": VERSION, "ember_version": __version__,
        **spec,
        "workspace": model.plan.to_json(),
        "files": files,
    }
    _write(folder, MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    return folder


def read_artifact(path: str | Path, mapped: bool = False) -> Artifact:
    """The folder's model, every check above run (see the module doc). mapped: the weights file
    is mapped instead of read, and its sha256 not checked (the model cache's own entries, which
    no one writes in place: ember.runtime.model_cache)."""
    folder = Path(path)
    where = folder / MANIFEST
    manifest = _read_manifest(folder)
    machine = manifest["target"]["machine"]
    if machine != platform.machine():
        raise ArtifactError(f"{folder} was built for {machine}; this machine is {platform.machine()}: "
                            f"compile the model again here")
    have = machine_features()
    lacking = sorted(set(manifest["target"].get("features", ())) - have) if have is not None else []
    if lacking:
        raise ArtifactError(f"{folder} was built for a machine with {', '.join(lacking)}, which this one lacks: "
                            f"compile the model again here")
    files = manifest["files"]
    library = open_library(_path(folder, files["library"]["path"]), _digest(files["library"], where), str(where))
    agreed = read_contract(library.handle)
    if agreed is None:
        raise ArtifactError(f"{folder / files['library']['path']} embeds no contract this ember reads (no "
                            f"ember_model_spec): it was not compiled by ember {_major_minor(_version())}.x; "
                            f"compile the model again")
    _compare(manifest, agreed, where, files["library"]["path"])
    align = manifest["target"].get("align", Target.align)
    if type(align) is not int or not 0 < align <= 4096 or align & (align - 1):
        raise ArtifactError(f"{where}: the target's alignment {align!r} is not a power of two of at most 4096 bytes: "
                            f"the manifest was edited; save the model again")
    weights = _read_weights(folder, files, agreed["weights"], where, align, mapped)
    source = None
    if files["source"] is not None:
        data = read_checked(_path(folder, files["source"]["path"]), _digest(files["source"], where), str(where))
        source = data.decode(errors="replace")
    return Artifact(folder, manifest, ModelSpec.from_json(manifest), library, weights, manifest["workspace"], source)


def backend_of(path: str | Path) -> str | None:
    """The backend that saved the folder in a format of its own ("ember.model/<backend>": a GPU's
    cubins and call program, ember.cuda.artifact), or None: this module's format, or no manifest
    that reads (read_artifact then says what is wrong)."""
    try:
        manifest = json.loads(read_regular(Path(path) / MANIFEST))
    except (ArtifactError, ValueError):
        return None
    found = manifest.get("format") if isinstance(manifest, dict) else None
    return found.removeprefix(f"{FORMAT}/") if isinstance(found, str) and found.startswith(f"{FORMAT}/") else None


# -- the manifest ------------------------------------------------------------------------------
def read_manifest(folder: Path, form: str, version: int) -> dict:
    """The JSON manifest of a folder saved in format `form` (this one's, a backend's), of
    `version`, saved by an ember of this major.minor version: else an ArtifactError saying which."""
    where = folder / MANIFEST
    try:
        manifest = json.loads(read_regular(where))
    except ArtifactError as e:
        raise ArtifactError(f"{folder} is not a saved ember model: cannot read {MANIFEST}: {e}") from None
    except ValueError as e:  # not JSON
        raise ArtifactError(f"{folder} is not a saved ember model: cannot read {MANIFEST} ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != form:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ArtifactError(f"{where} is not an {form} manifest (format {found!r})")
    ours, theirs = _version(), manifest.get("ember_version")
    if manifest.get("version") != version:
        raise ArtifactError(f"{where} has artifact format version {manifest.get('version')!r} (saved by ember "
                            f"{theirs}); this is ember {ours}, which reads version {version}: compile the model "
                            f"again")
    if not isinstance(theirs, str) or _major_minor(theirs) != _major_minor(ours):
        raise ArtifactError(f"{where} was saved by ember {theirs!r}; this is ember {ours}, which loads models "
                            f"saved by ember {_major_minor(ours)}.x only: compile the model again with this "
                            f"ember (or load it with the ember that saved it)")
    return manifest


def _read_manifest(folder: Path) -> dict:
    """The manifest of a folder, of this format, of a compatible version, fitting SCHEMA."""
    manifest = read_manifest(folder, FORMAT, VERSION)
    where = folder / MANIFEST
    problem = _check(manifest, SCHEMA, "manifest")
    if problem:
        raise ArtifactError(f"{where}: {problem}")
    return manifest


def _check(value, schema, where: str) -> str | None:
    """What is wrong with `value` under `schema` (see SCHEMA), or None."""
    if isinstance(schema, tuple):
        if any(_check(value, s, where) is None for s in schema):
            return None
        return f"{where} is {_kind(value)}, expected {' or '.join(_describe(s) for s in schema)}"
    if isinstance(schema, list):
        if not isinstance(value, list):
            return f"{where} is {_kind(value)}, expected a list"
        return next((p for k, v in enumerate(value) if (p := _check(v, schema[0], f"{where}[{k}]"))), None)
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return f"{where} is {_kind(value)}, expected an object"
        keys = {k.rstrip("?"): s for k, s in schema.items() if k != "*"}
        missing = [k for k in schema if k != "*" and not k.endswith("?") and k not in value]
        extra = [k for k in value if k not in keys] if "*" not in schema else []
        if missing or extra:
            return f"{where} " + "; ".join(([f"lacks key(s) {missing}"] if missing else [])
                                           + ([f"has unknown key(s) {extra}"] if extra else []))
        return next((p for k, v in value.items() if (p := _check(v, keys.get(k, schema.get("*")), f"{where}.{k}"))),
                    None)
    if schema is None:
        return None if value is None else f"{where} is {_kind(value)}, expected null"
    if isinstance(value, schema) and not (isinstance(value, bool) and schema is not bool):
        return None
    return f"{where} is {_kind(value)}, expected {_describe(schema)}"


def _describe(schema) -> str:
    if schema is None:
        return "null"
    if isinstance(schema, type):
        return {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}[schema]
    return "a list" if isinstance(schema, list) else "an object"


def _kind(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _version() -> str:
    from ..version import __version__

    return __version__


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


# -- the files -------------------------------------------------------------------------------
def _path(folder: Path, relative: str) -> Path:
    """A file the manifest names: a path inside the folder."""
    parts = PurePosixPath(relative)
    if parts.is_absolute() or ".." in parts.parts or not parts.parts:
        raise ArtifactError(f"{folder / MANIFEST} names the file {relative!r}, which is not inside {folder}")
    return folder / parts


def _digest(entry: dict, where) -> Digest:
    return Digest.from_json(entry, str(where))


def _compare(manifest: dict, agreed: dict, where: Path, library: str) -> None:
    """The manifest's account of the model must be the library's own (its contract)."""
    pairs = [(key, manifest[key], agreed[key]) for key in AGREED]
    pairs.append(("weights", manifest["weights"], [w["name"] for w in agreed["weights"]]))
    for key, mine, theirs in pairs:
        problem = _difference(mine, theirs, key, library)
        if problem:
            raise ArtifactError(f"{where}: {problem}: the manifest does not describe its library (edited, or "
                                f"taken from another model); save the model again")


def _difference(mine, theirs, where: str, library: str) -> str | None:
    """The first place where two JSON values differ, or None."""
    if isinstance(mine, list) and isinstance(theirs, list):
        for k, (a, b) in enumerate(zip(mine, theirs)):
            if problem := _difference(a, b, f"{where}[{k}]", library):
                return problem
        if len(mine) != len(theirs):
            return f"{where} has {len(mine)} entries, the library {library} has {len(theirs)}"
        return None
    if isinstance(mine, dict) and isinstance(theirs, dict) and mine.keys() == theirs.keys():
        return next((p for k in mine if (p := _difference(mine[k], theirs[k], f"{where}.{k}", library))), None)
    if mine == theirs and type(mine) is type(theirs):
        return None
    return f"{where} is {_kind(mine)} where the library {library} has {_kind(theirs)}"


def _read_weights(folder: Path, files: dict, agreed: list[dict], where: Path, align: int,
                  mapped: bool = False) -> dict[str, np.ndarray]:
    """The weights the contract lists, in its order, each of its dtype and shape: read-only views of
    the file's bytes, read with its data on an `align`-byte boundary (mapped: views of its pages,
    aligned where the file's data starts on a page, as `save_graph` writes it)."""
    entry = files["weights"]
    path = _path(folder, entry["path"])
    if files["graph"] is not None:
        from ..graph.serialize import CONSTANTS_FILE

        expected = _path(folder, files["graph"]["path"]).parent / CONSTANTS_FILE
        if path != expected:
            raise ArtifactError(f"{where}: the weights are {entry['path']}, but the graph's constants are "
                                f"{expected.relative_to(folder)}: the manifest was edited; save the model again")
    # (read with the data aligned as the model's weights are: the model takes them without a copy)
    data = map_regular(path, entry["size"], str(where)) if mapped else \
        read_checked(path, _digest(entry, where), str(where), aligned=(align, data_offset))
    try:
        stored = tensors(data)  # views of the bytes just checked
    except ValueError as e:
        raise ArtifactError(f"{path} is not a safetensors file: {e}") from None
    weights = {}
    for w in agreed:
        name, want = w["name"], f"{w['dtype']}{w['shape']}"
        if name not in stored:
            raise ArtifactError(f"{path} lacks the weight {name!r} ({want}) that the library needs")
        got = stored[name]
        if got.dtype.name != w["dtype"] or list(got.shape) != w["shape"]:
            raise ArtifactError(f"{path}: weight {name!r} is {got.dtype.name}{list(got.shape)}, the library "
                                f"expects {want}")
        weights[name] = got
    return weights


def data_offset(head: bytes) -> int:
    """Where a safetensors file's data starts, from its first 8 bytes (the header's length)."""
    return 8 + int.from_bytes(head, "little")


def _entry(folder: Path, relative: str, algorithm: str = "sha256") -> dict:
    """The manifest's record of a file written: its path, size and hash."""
    return {"path": relative, **Digest.of_file(folder / relative, algorithm).to_json()}


def _write(folder: Path, relative: str, data: bytes, algorithm: str = "sha256") -> dict:
    """Write `data` to folder/relative atomically (a temporary file, renamed); its record."""
    write_atomic(folder / relative, data)
    return {"path": relative, **Digest.of(data, algorithm).to_json()}
