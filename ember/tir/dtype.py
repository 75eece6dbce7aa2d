"""Data types of the loop IR, as strings: "float32", "int8", "bool", and vectors "float32x8".

float16 is a storage type: values loaded from a float16 buffer are computed in float32 (see
`compute_dtype`) and rounded back to half when stored.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import EmberError

SCALAR_DTYPES = (
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
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
    return element_of(dtype).startswith("float")


def is_int(dtype: str) -> bool:
    return element_of(dtype).startswith(("int", "uint"))


def is_bool(dtype: str) -> bool:
    return element_of(dtype) == "bool"


def bits(dtype: str) -> int:
    elem = element_of(dtype)
    return 8 if elem == "bool" else int(re.sub(r"[a-z]", "", elem))


def compute_dtype(dtype: str) -> str:
    """The type arithmetic happens in: float16 is computed as float32."""
    return with_lanes("float32", lanes_of(dtype)) if element_of(dtype) == "float16" else dtype


def to_numpy(dtype: str) -> np.dtype:
    return np.dtype(element_of(dtype))


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
