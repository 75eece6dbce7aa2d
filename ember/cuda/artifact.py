"""A model compiled for the GPU, on disk: its cubins, its call program and its weights.

    model.ember/
      manifest.json          format "ember.model/cuda", its version, the ember that saved it, the
                             model's spec (inputs, outputs, symbols and their ranges, weights,
                             kernels), the workspace plan, the call program (its launches and
                             copies as JSON), each kernel's launch (symbol, block, grid: constant,
                             or expressions of its sizes, ember.cuda.grid), and the path, size and
                             sha256 of each file below
      kernels/<kernel>.cubin the kernels as NVRTC built them (PTX where they were built as PTX)
      kernels/<kernel>.cu    and their CUDA C, for reading and debugging
      weights.safetensors    the weights

`save_cuda` writes the folder (each file atomically, the manifest last); `read_cuda` reads it
back (the CUDA backend makes a CUDAModel of it, its memory plan from the manifest), checking the
manifest's format and version, and each file's size and sha256 on the very bytes then used, as
ember's CPU artifacts are (ember.runtime.artifact): the first problem is an ArtifactError naming
the file. Nothing is compiled at load and no GPU is needed until the first call; a cubin built
for another architecture than the GPU's is refused by the driver at the first call (a
DeviceError naming the kernel): compile the model again there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save

from ..errors import ArtifactError
from ..program import Arg, Copy, Launch, Program, Ref, SizeExpr
from ..runtime.artifact import _digest, _path, _read_weights, _write, read_manifest
from ..runtime.library import read_checked
from ..runtime.spec import ModelSpec
from ..target import Target
from .kernel import CUDAKernel

FORMAT = "ember.model/cuda"
VERSION = 1
MANIFEST = "manifest.json"


def save_cuda(model, path: str | Path) -> Path:
    """Write the folder of `model` (a CUDAModel; see the module doc)."""
    from ..version import __version__

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ArtifactError(f"cannot save the model to {folder}: it is a file")
    (folder / "kernels").mkdir(parents=True, exist_ok=True)
    entry = model._entry
    kernels = [{**k.to_json(), "file": _write(folder, f"kernels/{name}.cubin", k.binary),
                "source": _write(folder, f"kernels/{name}.cu", k.source.encode())} for name, k in entry.kernels.items()]
    weights = {k: np.ascontiguousarray(v) for k, v in model.weights.items()}
    manifest = {
        "format": FORMAT, "version": VERSION, "ember_version": __version__,
        **model.spec.to_json(),
        "workspace": model.plan.to_json(),
        "program": [_statement(st) for st in entry.program.body],
        "kernel_launches": kernels,
        "files": {"weights": _write(folder, "weights.safetensors", save(weights))},
        "weight_types": [{"name": n, "dtype": w.dtype.name, "shape": list(w.shape)} for n, w in weights.items()],
    }
    _write(folder, MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    return folder


@dataclass(frozen=True)
class Saved:
    """A CUDA model's folder, read and checked: what the model is made of."""

    spec: ModelSpec
    program: Program  # its launches and copies (no loop IR: `kernels` are launched by name)
    kernels: dict[str, CUDAKernel]
    weights: dict[str, np.ndarray]
    workspace: list  # the memory plan as JSON (ember.passes.plan_memory.MemoryPlan.to_json)
    align: int


def read_cuda(path: str | Path) -> Saved:
    """The model saved in `path`, every file checked (see the module doc)."""
    folder = Path(path)
    where = folder / MANIFEST
    manifest = _manifest(folder)
    try:
        spec = ModelSpec.from_json(manifest)
        files = manifest["files"]
        kernels = {}
        for record in manifest["kernel_launches"]:
            binary, source = (read_checked(_path(folder, record[f]["path"]), _digest(record[f], where), str(where))
                              for f in ("file", "source"))
            kernels[record["name"]] = CUDAKernel.restore(record, bytes(binary), bytes(source).decode())
        program = Program((), tuple(_statement_of(st) for st in manifest["program"]), tuple(spec.weights))
        align = spec.target.get("align", Target.align)
        weights = _read_weights(folder, {"weights": files["weights"], "graph": None}, manifest["weight_types"],
                                where, align)
        workspace = list(manifest["workspace"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise ArtifactError(f"{where}: the manifest is not one this ember wrote ({type(e).__name__}: {e}); save the "
                            f"model again") from None
    missing = [k for st in program.launches() if (k := st.kernel) not in kernels]
    if missing:
        raise ArtifactError(f"{where}: the program launches kernel(s) {missing} that the manifest does not list")
    return Saved(spec, program, kernels, weights, workspace, align)


def _manifest(folder: Path) -> dict:
    return read_manifest(folder, FORMAT, VERSION)


# -- the call program as JSON -----------------------------------------------------------------
def _statement(st) -> dict:
    match st:
        case Launch():
            return {"launch": st.kernel, "args": [[_ref(a.ref), [_dim(d) for d in a.dims], a.dtype] for a in st.args],
                    "sizes": [_ref(r) for r in st.sizes], "outputs": st.outputs, "comment": st.comment}
        case Copy():
            return {"copy": [_ref(st.dst), _ref(st.src)], "dims": [_dim(d) for d in st.dims], "itemsize": st.itemsize}
    raise ArtifactError(f"a {type(st).__name__} statement has no saved form for target 'cuda'")


def _statement_of(d: dict):
    if "launch" in d:
        return Launch(d["launch"], (), tuple(Arg(_ref_of(r), tuple(_dim_of(x) for x in dims), dtype)
                                             for r, dims, dtype in d["args"]),
                      tuple(_ref_of(r) for r in d["sizes"]), d["outputs"], d["comment"])
    dst, src = d["copy"]
    return Copy(_ref_of(dst), _ref_of(src), tuple(_dim_of(x) for x in d["dims"]), d["itemsize"])


def _ref(r: Ref) -> list:
    return [r.kind, r.index]


def _ref_of(r: list) -> Ref:
    return Ref(str(r[0]), int(r[1]))


def _dim(d) -> int | dict:
    if isinstance(d, Ref):
        return {"size": d.index}
    if isinstance(d, SizeExpr):
        return {"terms": [[list(idx), c] for idx, c in d.terms]}
    return int(d)


def _dim_of(d):
    if isinstance(d, int):
        return d
    if "size" in d:
        return Ref("size", int(d["size"]))
    return SizeExpr(tuple((tuple(int(i) for i in idx), int(c)) for idx, c in d["terms"]))
