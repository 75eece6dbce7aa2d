"""What a model's library expects, recorded in the library itself.

The translation unit of a model exports `const char* ember_model_spec(void)`
(ember.codegen.entry.render_spec), which returns this contract as JSON: the inputs and outputs
(names, shapes, dtypes), the symbols in the order of the entry function's `sizes`, the weights in
the order of its `weights` array with their dtypes and shapes, the kernels, and the workspace plan
the offsets are computed from. A saved model's manifest is a text file anyone can edit; the
library's own account is in the library's bytes, which the manifest's sha256 pins. ember.load
compares the manifest and the weights with it (ember.runtime.artifact), so an edited shape, a
reordered weight list or an edited workspace is a named error, never a call that writes out of
bounds.

The model's name and target are not in the contract: they do not change what the code does, and
two models that differ only in them share one library in the build cache.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Mapping

import numpy as np

from ..codegen.entry import SPEC
from .spec import ModelSpec

FORMAT = "ember.contract"
VERSION = 1
KEYS = {"format", "version", "inputs", "outputs", "symbols", "weights", "kernels", "workspace"}


def contract(spec: ModelSpec, workspace: list, weights: Mapping[str, np.ndarray]) -> dict:
    """The contract of a model's library, as JSON data (`workspace`: MemoryPlan.to_json())."""
    described = spec.to_json()
    return {
        "format": FORMAT, "version": VERSION,
        "inputs": described["inputs"], "outputs": described["outputs"], "symbols": described["symbols"],
        "weights": [{"name": w, "dtype": np.asarray(weights[w]).dtype.name, "shape": list(np.shape(weights[w]))}
                    for w in spec.weights],
        "kernels": described["kernels"], "workspace": workspace,
    }


def contract_text(data: dict) -> str:
    """The contract as the library embeds it (compact, keys sorted)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def read_contract(handle: ctypes.CDLL) -> dict | None:
    """The contract a loaded library embeds, or None when it has none (or not one of this version)."""
    try:
        function = getattr(handle, SPEC)
    except AttributeError:
        return None
    function.argtypes, function.restype = [], ctypes.c_char_p
    raw = function()
    try:
        data = json.loads(raw.decode()) if raw is not None else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        return None
    return data if data.keys() >= KEYS else None
