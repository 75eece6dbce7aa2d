"""A compiled model on disk: a folder that loads without tracing or compiling anything.

    model.ember/
      manifest.json              format, ember version, name, inputs, outputs (names, shapes,
                                 dtypes), symbols, weights, kernels, target, workspace plan, files
      model.so                   the shared library (the entry function and every kernel)
      model.c                    its C source, for reading and debugging
      graph/graph.json           the graph IR it was compiled from (ember.graph.serialize) ...
      graph/constants.safetensors  ... whose constants are the weights

A model without its graph keeps its weights in weights.safetensors instead. `save_artifact`
writes the folder (files replaced one by one with `os.replace`, the manifest last);
`read_artifact` reads it back into an `Artifact`, from which ember.load builds the
CompiledModel. A library built for another machine is refused.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from ..errors import ArtifactError
from .model import CompiledModel, ModelSpec

FORMAT = "ember.model"
VERSION = 1
MANIFEST = "manifest.json"
LIBRARY = "model.so"
SOURCE = "model.c"
GRAPH = "graph"
WEIGHTS = "weights.safetensors"


@dataclass(frozen=True)
class Artifact:
    folder: Path
    manifest: dict
    spec: ModelSpec
    library: Path
    weights: dict[str, np.ndarray]
    workspace: list  # the memory plan as JSON (ember.passes.plan_memory.MemoryPlan.to_json)
    graph_folder: Path | None


def save_artifact(model: CompiledModel, path: str | Path) -> Path:
    from .. import __version__

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ArtifactError(f"cannot save the model to {folder}: it is a file")
    folder.mkdir(parents=True, exist_ok=True)
    _copy(model.library_path, folder / LIBRARY)
    if model.source is not None:
        _write_text(folder / SOURCE, model.source)
    graph = model.graph
    if graph is not None:
        from ..graph.serialize import CONSTANTS_FILE, save_graph

        save_graph(graph, folder / GRAPH)
        weights_file = f"{GRAPH}/{CONSTANTS_FILE}"
    else:
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            save_file({k: np.ascontiguousarray(v) for k, v in model.weights.items()}, Path(tmp) / WEIGHTS)
            os.replace(Path(tmp) / WEIGHTS, folder / WEIGHTS)
        weights_file = WEIGHTS
    manifest = {
        "format": FORMAT, "version": VERSION, "ember_version": __version__,
        **model.spec.to_json(),
        "workspace": model.plan.to_json(),
        "files": {"library": LIBRARY, "source": SOURCE if model.source is not None else None,
                  "weights": weights_file, "graph": GRAPH if graph is not None else None},
    }
    _write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return folder


def read_artifact(path: str | Path) -> Artifact:
    folder = Path(path)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{folder} is not a saved ember model: cannot read {MANIFEST} ({e})") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise ArtifactError(f"{folder / MANIFEST} is not an {FORMAT} manifest of version {VERSION} "
                            f"(format {manifest.get('format')!r}, version {manifest.get('version')!r})")
    spec = ModelSpec.from_json(manifest)
    machine = spec.target.get("machine")
    if machine not in (None, platform.machine()):
        raise ArtifactError(f"{folder} was built for {machine}; this machine is {platform.machine()}: "
                            f"compile the model again here")
    files = manifest["files"]
    library = folder / files["library"]
    if not library.is_file():
        raise ArtifactError(f"{folder}: the library {files['library']} is missing")
    try:
        stored = load_file(folder / files["weights"])
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{folder}: cannot read the weights {files['weights']} ({e})") from None
    missing = [w for w in spec.weights if w not in stored]
    if missing:
        raise ArtifactError(f"{folder}: weights {missing} are missing from {files['weights']}")
    graph = folder / files["graph"] if files.get("graph") else None
    return Artifact(folder, manifest, spec, library, {w: stored[w] for w in spec.weights},
                    manifest["workspace"], graph)


def _copy(src: Path, dst: Path) -> None:
    if src.resolve() == dst.resolve():  # saving a loaded model back where it came from
        return
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _write_text(dst: Path, text: str) -> None:
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, dst)
