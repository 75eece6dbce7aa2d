"""Graphs on disk and as bytes, the structure as the text form and the constants as safetensors.

`save_graph(graph, folder)` writes folder/graph.json ({"format", "version", "graph": the text
form's lines}) and folder/constants.safetensors; `load_graph(folder)` reads them back.
The constants file's data starts on a page (PAGE bytes; the header padded with spaces, as the
format allows), the tensors of a multiple of 64 bytes first: a mapping of the file (the model
cache's entries, ember.runtime.model_cache) holds them aligned as a model holds its weights, so
they are used where they lie, not copied.
`graph_to_bytes` / `graph_from_bytes` hold both in one safetensors blob, the text in its
metadata with the sha256 of the text and of each constant (its dtype, shape and bytes), checked
on reading: a damaged byte is a GraphError naming the text or the constant it changed, where it
read as another value (a saved model, CompiledModel.save, checks its files' sha256 the same
way). Blobs of version 1 (before the digests) are read as they were, unchecked: there is nothing
to check them against. Constant data (a region's too, keyed as Graph.all_constants says) never goes into the
text (exact bits, any size), and every dtype that safetensors stores round-trips (bool,
int8..int64, uint8..uint64, float16/32/64, bfloat16: safetensors writes "BF16", which its NumPy
reader does not read, so `_load` reads those as their bits).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load, save, save_file

from ..tir import dtype as dt
from .core import Graph, GraphError
from .parser import parse_graph
from .printer import graph_to_text

FORMAT = "ember.graph"
VERSION = 1
BLOB_VERSION = 2  # 2: the metadata holds the sha256 of the text and of each constant; 1: none
GRAPH_FILE = "graph.json"
CONSTANTS_FILE = "constants.safetensors"
PAGE = 4096


def save_graph(graph: Graph, folder: str | Path) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _save_constants(_tensors(graph), folder / CONSTANTS_FILE)
    manifest = {"format": FORMAT, "version": VERSION, "graph": graph_to_text(graph, max_inline=0).splitlines()}
    (folder / GRAPH_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    return folder


def load_graph(folder: str | Path) -> Graph:
    folder = Path(folder)
    try:
        manifest = json.loads((folder / GRAPH_FILE).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise GraphError(f"{folder} holds no saved graph: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION \
            or not isinstance(manifest.get("graph"), list) or not all(isinstance(x, str) for x in manifest["graph"]):
        raise GraphError(f"{folder / GRAPH_FILE} is not an {FORMAT} file of version {VERSION}")
    try:
        blob = (folder / CONSTANTS_FILE).read_bytes()
    except OSError as e:
        raise GraphError(f"{folder} holds no constants of its saved graph: {e}") from None
    return parse_graph("\n".join(manifest["graph"]), _constants(blob, folder / CONSTANTS_FILE))


def graph_to_bytes(graph: Graph) -> bytes:
    tensors, text = _tensors(graph), graph_to_text(graph, max_inline=0)
    digests = {"graph": _text_sha256(text), "constants": {k: _constant_sha256(a) for k, a in tensors.items()}}
    return save(tensors, metadata={"format": FORMAT, "version": str(BLOB_VERSION), "graph": text,
                                   "sha256": json.dumps(digests)})


def graph_from_bytes(blob: bytes) -> Graph:
    # safetensors: an 8-byte little-endian header length, then the JSON header with the metadata
    try:
        size = int.from_bytes(blob[:8], "little")
        metadata = json.loads(blob[8:8 + size]).get("__metadata__") or {}
        version = metadata.get("version") if metadata.get("format") == FORMAT else None
        text = metadata["graph"] if version in ("1", str(BLOB_VERSION)) else None
        # (a version 1 blob holding digests, its version damaged, is checked all the same)
        digests = json.loads(metadata["sha256"]) if version == str(BLOB_VERSION) or "sha256" in metadata else None
    except (ValueError, AttributeError, KeyError) as e:
        raise GraphError(f"not a saved graph: {e}") from None
    if not isinstance(text, str):
        raise GraphError(f"not an {FORMAT} blob of version 1 or {BLOB_VERSION}")
    constants = _constants(blob, "the blob")
    if digests is not None:
        _check_digests(digests, text, constants)
    return parse_graph(text, constants)


def _check_digests(digests, text: str, constants: dict[str, np.ndarray]) -> None:
    """The blob's text and constants against the sha256 its metadata records for each: a
    GraphError naming what does not match (a damaged byte, there or in the digest itself)."""
    if not isinstance(digests, dict) or not isinstance(digests.get("graph"), str) \
            or not isinstance(digests.get("constants"), dict):
        raise GraphError("the blob's sha256 record is damaged: it names no digest of the graph and its constants")
    if _text_sha256(text) != digests["graph"]:
        raise GraphError("the blob is damaged: its graph text does not match the sha256 recorded for it")
    recorded = digests["constants"]
    if set(recorded) != set(constants):
        odd = sorted(set(recorded) ^ set(constants))
        raise GraphError(f"the blob is damaged: its constants {odd} are not those its sha256 record names")
    for k, a in constants.items():
        if _constant_sha256(a) != recorded[k]:
            raise GraphError(f"the blob is damaged: constant {k!r} ({a.dtype} {a.shape}) does not match the sha256 "
                             "recorded for it")


def _text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _constant_sha256(a: np.ndarray) -> str:
    """The sha256 of a constant's dtype, shape and bytes (a changed dtype or shape in the header
    reads its bytes as other values too)."""
    h = hashlib.sha256(f"{a.dtype.name} {a.shape}\n".encode())
    h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
    return h.hexdigest()


def _constants(blob: bytes, where) -> dict[str, np.ndarray]:
    """`_load(blob)`, or a GraphError naming `where` for bytes that are no safetensors file (a
    header that misses a field or does not cover the data: safetensors' own error, or a KeyError)."""
    try:
        return _load(blob)
    except (SafetensorError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise GraphError(f"{where}: the constants of the saved graph cannot be read: {e}") from None


def _save_constants(tensors: dict[str, np.ndarray], path: Path) -> None:
    """A safetensors file of `tensors` whose data starts at a multiple of PAGE bytes, the tensors
    of a multiple of 64 bytes first (see the module doc); one of a dtype ember's reader does not
    know (dt.SAFETENSORS) is saved by safetensors as it lays it out."""
    names = {d: s for s, d in dt.SAFETENSORS.items()}
    if any(a.dtype.name not in names for a in tensors.values()):
        save_file(tensors, path)
        return
    order = sorted(tensors, key=lambda k: (tensors[k].nbytes % 64 != 0, k))
    header, at = {}, 0
    for k in order:
        a = tensors[k]
        header[k] = {"dtype": names[a.dtype.name], "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-(8 + len(head)) % PAGE)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for k in order:
            f.write(np.ascontiguousarray(tensors[k]).reshape(-1).view(np.uint8))


def _tensors(graph: Graph) -> dict[str, np.ndarray]:
    return {key: np.asarray(data, order="C") for key, data in graph.all_constants()}


def _load(blob: bytes) -> dict[str, np.ndarray]:
    """The tensors of a safetensors blob, bf16 ones too: read as uint16 (the header says "U16"
    for them), then viewed as bfloat16."""
    size = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + size])
    bf16 = [k for k, v in header.items() if k != "__metadata__" and v.get("dtype") == "BF16"]
    if not bf16:
        return load(blob)
    for k in bf16:
        header[k]["dtype"] = "U16"
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    out = load(len(head).to_bytes(8, "little") + head + blob[8 + size:])
    return {k: v.view(dt.to_numpy("bfloat16")) if k in bf16 else v for k, v in out.items()}
