"""The tensors of a safetensors file's bytes, as read-only NumPy views of those bytes.

ember.load reads a weights file once, checks its sha256, and takes the tensors from the same
bytes: `safetensors.numpy.load` would copy every tensor before CompiledModel copies it again into
aligned memory, and mapping the file instead would let a file truncated meanwhile kill the process
(SIGBUS). The format: an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and [begin, end) byte offsets into the data that follows (and an optional
"__metadata__"), then the data, every byte of which the tensors index. Anything that is not that
(a header out of bounds, an unknown dtype, offsets that do not fit the shape, data the tensors do
not end at) is a ValueError that says what.
"""

from __future__ import annotations

import json
import math

import numpy as np

from ..tir import dtype as dt

DTYPES = dt.SAFETENSORS


def tensors(data: bytes | np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file's bytes, or of a uint8 array of them (views: read-only
    when `data` is, keep it alive with them)."""
    data = memoryview(data)
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes: shorter than the header length")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8:
        raise ValueError(f"the header is {size} bytes, the file has {len(data) - 8} after the length")
    try:
        header = json.loads(bytes(data[8:8 + size]))
    except ValueError as e:
        raise ValueError(f"the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    body = data[8 + size:]
    out = {}
    for name, entry in header.items():
        if name != "__metadata__":
            out[name] = _tensor(name, entry, body)
    end = max((int(e["data_offsets"][1]) for n, e in header.items() if n != "__metadata__"), default=0)
    if end != len(body):  # (the format indexes every byte: a header length edited into its padding shows here)
        raise ValueError(f"the tensors end at byte {end} of the data, which has {len(body)}")
    return out


def _tensor(name: str, entry, body: memoryview) -> np.ndarray:
    try:
        dtype = np.dtype(dt.to_numpy(DTYPES[entry["dtype"]])).newbyteorder("<")
        shape = tuple(int(d) for d in entry["shape"])
        begin, end = (int(o) for o in entry["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"tensor {name!r}: {json.dumps(entry)[:80]} is not a dtype (one of {sorted(DTYPES)}), "
                         f"shape and data_offsets") from None
    nbytes = math.prod(shape) * dtype.itemsize
    if min(shape, default=0) < 0 or not 0 <= begin <= end <= len(body) or end - begin != nbytes:
        raise ValueError(f"tensor {name!r}: bytes [{begin}, {end}) of {len(body)} do not hold "
                         f"{dtype.name}{list(shape)} ({nbytes} bytes)")
    return np.frombuffer(body[begin:end], dtype).reshape(shape)
