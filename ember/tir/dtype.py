"""Data types of the loop IR, as strings: "float32", "int8", "bool", and vectors "float32x8".

float16 and bfloat16 are storage types: values loaded from their buffers are computed in float32
(see `compute_dtype`) and rounded back to 16 bits when stored. NumPy holds bfloat16 as
`ml_dtypes.bfloat16` (ml_dtypes comes with onnx); importing it here makes `np.dtype("bfloat16")`
known wherever a dtype name becomes a NumPy dtype.
"""

from __future__ import annotations

import contextlib
import re

import numpy as np

from ..errors import EmberError

with contextlib.suppress(ImportError):  # without it no bfloat16 array can be made, nor reach ember
    import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)

SCALAR_DTYPES = (
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32",
    "float64",
)
INDEX_DTYPE = "int64"

_VECTOR = re.compile(r"^([a-z]+[0-9]*)x([0-9]+)$")


class DTypeError(EmberError, TypeError):
    """An unknown dtype name, or an operation on dtypes that do not fit together."""


def check(dtype: str) -> str:
    """Return `dtype` if it is a known scalar or vector dtype, else raise DTypeError."""
    elem = element_of(dtype)
    if elem not in SCALAR_DTYPES:
        raise DTypeError(f"unknown dtype {dtype!r}; ember knows {', '.join(SCALAR_DTYPES)}")
    return dtype


def lanes_of(dtype: str) -> int:
    m = _VECTOR.match(dtype)
    return int(m.group(2)) if m else 1


def element_of(dtype: str) -> str:
    m = _VECTOR.match(dtype)
    return m.group(1) if m else dtype


def with_lanes(dtype: str, lanes: int) -> str:
    elem = element_of(dtype)
    return elem if lanes == 1 else f"{elem}x{lanes}"


def is_float(dtype: str) -> bool:
    return element_of(dtype).startswith(("float", "bfloat"))


def is_int(dtype: str) -> bool:
    return element_of(dtype).startswith(("int", "uint"))


def is_bool(dtype: str) -> bool:
    return element_of(dtype) == "bool"


def bits(dtype: str) -> int:
    elem = element_of(dtype)
    return 8 if elem == "bool" else int(re.sub(r"[a-z]", "", elem))


HALF_DTYPES = ("float16", "bfloat16")  # stored in 16 bits, computed in float32


def compute_dtype(dtype: str) -> str:
    """The type arithmetic happens in: float16 and bfloat16 are computed as float32."""
    return with_lanes("float32", lanes_of(dtype)) if element_of(dtype) in HALF_DTYPES else dtype


def to_numpy(dtype: str) -> np.dtype:
    elem = element_of(dtype)
    try:
        return np.dtype(elem)
    except TypeError:
        raise DTypeError(f"{elem} arrays need the ml_dtypes package (pip install ml_dtypes; onnx installs it)") \
            from None


def from_numpy(dtype) -> str:
    return check(np.dtype(dtype).name)


_RANK = {d: i for i, d in enumerate(SCALAR_DTYPES)}


def promote(a: str, b: str) -> str:
    """The result type of a binary operation: floats win over ints, wider wins over narrower."""
    if a == b:
        return a
    ea, eb = element_of(a), element_of(b)
    lanes = max(lanes_of(a), lanes_of(b))
    if is_float(ea) != is_float(eb):
        elem = ea if is_float(ea) else eb
    else:
        elem = ea if _RANK[ea] >= _RANK[eb] else eb
    return with_lanes(elem, lanes)
