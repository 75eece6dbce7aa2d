"""Data types of the loop IR, as strings: "float32", "int8", "bool", and vectors "float32x8".

float16, bfloat16 and the narrow floats are storage types: values loaded from their buffers are
computed in float32 (see `compute_dtype`) and rounded back when stored. The narrow floats are
ONNX's float8 types (float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz,
float8_e8m0fnu) and float4_e2m1fn, one element per byte (`MINIFLOATS` describes their
encodings). The sub-byte integers int4, uint4, int2 and uint2 are held one per byte too and
computed in int8 or uint8, wrapped back to their width after every operation and on store.
One element per byte is how NumPy holds them: `ml_dtypes` (it comes with onnx) gives NumPy
bfloat16 and every one of these types, and importing it here makes `np.dtype("float8_e4m3fn")`
known wherever a dtype name becomes a NumPy dtype; ONNX's packing of the 4- and 2-bit types (two
or four to a byte) is undone when a model's tensors are read (`onnx.numpy_helper.to_array`).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

import numpy as np

from ..errors import EmberError

with contextlib.suppress(ImportError):  # without it no bfloat16 array can be made, nor reach ember
    import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)

SCALAR_DTYPES = (
    "bool", "int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float4_e2m1fn", "float8_e8m0fnu", "float8_e5m2fnuz", "float8_e5m2", "float8_e4m3fnuz", "float8_e4m3fn",
    "float16", "bfloat16", "float32", "float64",
)
INDEX_DTYPE = "int64"
# safetensors' names of the dtypes ember reads from and writes to its files (ember.runtime.tensor_file)
SAFETENSORS = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16", "U32": "uint32",
               "I32": "int32", "U64": "uint64", "I64": "int64", "F16": "float16", "BF16": "bfloat16",
               "F32": "float32", "F64": "float64"}

_VECTOR = re.compile(r"^([a-z][a-z0-9_]*?)x([0-9]+)$")


@dataclass(frozen=True)
class Minifloat:
    """The encoding of a narrow float: `exponent` and `mantissa` bits, the exponent `bias`, and
    what its codes beyond the finite values mean: `kind` "ieee" (inf and NaNs at the largest
    exponent, as float16), "fn" (no inf; the one NaN per sign is all ones), "fnuz" (no inf, no
    -0: the NaN is 0x80), "e8m0" (no sign, no zero: 2**(code - 127), 0xFF is NaN) or "finite"
    (no inf, no NaN: float4_e2m1fn). `max_code` is the code of the largest finite value."""

    exponent: int
    mantissa: int
    bias: int
    kind: str
    max_code: int

    @property
    def sign_bit(self) -> int:
        return 0 if self.kind == "e8m0" else 1 << (self.exponent + self.mantissa)

    def value(self, code: int) -> float:
        """The value of a code (NaN for NaN codes)."""
        sign = -1.0 if code & self.sign_bit else 1.0
        magnitude = code & ~self.sign_bit
        if self.kind == "e8m0":
            return float("nan") if code == 0xFF else 2.0 ** (code - 127)
        if self.kind == "fnuz" and code == 0x80 or magnitude > self.max_code and self.kind != "ieee":
            return float("nan")
        e, m = magnitude >> self.mantissa, magnitude & ((1 << self.mantissa) - 1)
        if self.kind == "ieee" and e == (1 << self.exponent) - 1:
            return sign * float("inf") if m == 0 else float("nan")
        if e == 0:
            return sign * m * 2.0 ** (1 - self.bias - self.mantissa)
        return sign * (1 + m / (1 << self.mantissa)) * 2.0 ** (e - self.bias)


MINIFLOATS = {
    "float8_e4m3fn": Minifloat(4, 3, 7, "fn", 0x7E),
    "float8_e4m3fnuz": Minifloat(4, 3, 8, "fnuz", 0x7F),
    "float8_e5m2": Minifloat(5, 2, 15, "ieee", 0x7B),
    "float8_e5m2fnuz": Minifloat(5, 2, 16, "fnuz", 0x7F),
    "float8_e8m0fnu": Minifloat(8, 0, 127, "e8m0", 0xFE),
    "float4_e2m1fn": Minifloat(2, 1, 1, "finite", 0x7),
}
# sub-byte integers: dtype -> (the dtype they are held and computed in, their width in bits)
SUBBYTE_INTS = {"int4": ("int8", 4), "uint4": ("uint8", 4), "int2": ("int8", 2), "uint2": ("uint8", 2)}


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
    """The bits of one element in memory (a byte for bool, the narrow floats and sub-byte ints)."""
    elem = element_of(dtype)
    if elem == "bool" or elem in MINIFLOATS or elem in SUBBYTE_INTS:
        return 8
    return int(re.sub(r"[a-z]", "", elem))


def value_bits(dtype: str) -> int:
    """The bits of an integer's values: its width, 4 for int4 (held in a byte)."""
    elem = element_of(dtype)
    return SUBBYTE_INTS[elem][1] if elem in SUBBYTE_INTS else bits(elem)


def int_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of an integer dtype."""
    b = value_bits(dtype)
    return (0, (1 << b) - 1) if element_of(dtype).startswith("u") else (-(1 << (b - 1)), (1 << (b - 1)) - 1)


HALF_DTYPES = ("float16", "bfloat16")  # stored in 16 bits, computed in float32
# held in memory as their bits (C has no type for them), computed in float32
BITS_FLOATS = ("bfloat16", *MINIFLOATS)


def compute_dtype(dtype: str) -> str:
    """The type arithmetic happens in: float16, bfloat16 and the narrow floats are computed as
    float32, the sub-byte integers as int8 or uint8."""
    elem = element_of(dtype)
    if elem in HALF_DTYPES or elem in MINIFLOATS:
        return with_lanes("float32", lanes_of(dtype))
    if elem in SUBBYTE_INTS:
        return with_lanes(SUBBYTE_INTS[elem][0], lanes_of(dtype))
    return dtype


def to_numpy(dtype: str) -> np.dtype:
    elem = element_of(dtype)
    try:
        return np.dtype(elem)
    except TypeError:
        raise DTypeError(f"{elem} arrays need the ml_dtypes package (pip install ml_dtypes; onnx installs it)") \
            from None


def is_narrow(dtype: str) -> bool:
    """A narrow float or a sub-byte integer (one element per byte, a NumPy type of ml_dtypes)."""
    return element_of(dtype) in MINIFLOATS or element_of(dtype) in SUBBYTE_INTS


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
