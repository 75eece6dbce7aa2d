"""The element types of the tile language (`tl.float32`, ...) and `tl.constexpr`, spelled as
Triton spells them. A dtype knows its NumPy dtype and its loop-IR dtype name, so the interpreter
and the compiler agree on every value's type."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class dtype:
    """An element type: `tl.float32`, `tl.int64`, `tl.int1` (booleans), `tl.pointer_type(tl.float32)`."""

    name: str

    @property
    def is_pointer(self) -> bool:
        return False

    def is_floating(self) -> bool:
        return self.name in FLOATING

    def is_int(self) -> bool:
        return self.name in SIGNED or self.name in UNSIGNED or self.name == "int1"

    def is_int_signed(self) -> bool:
        return self.name in SIGNED

    def is_int_unsigned(self) -> bool:
        return self.name in UNSIGNED

    def is_bool(self) -> bool:
        return self.name == "int1"

    @property
    def primitive_bitwidth(self) -> int:
        return 1 if self.name == "int1" else np.dtype(self.numpy).itemsize * 8

    @property
    def numpy(self) -> str:
        """The NumPy dtype name (bfloat16 comes from ml_dtypes)."""
        return NUMPY_OF[self.name]

    def __repr__(self) -> str:
        return f"triton.language.{self.name}"


@dataclass(frozen=True)
class pointer_type(dtype):
    """A pointer to elements of `element_ty` (what a tensor argument becomes in a kernel)."""

    element_ty: dtype = None

    def __init__(self, element_ty: dtype):
        object.__setattr__(self, "name", f"pointer<{element_ty.name}>")
        object.__setattr__(self, "element_ty", element_ty)

    @property
    def is_pointer(self) -> bool:
        return True

    @property
    def numpy(self) -> str:
        return "int64"

    def __repr__(self) -> str:
        return f"pointer_type({self.element_ty!r})"


SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
FLOATING = ("float16", "bfloat16", "float32", "float64")
NUMPY_OF = {"int1": "bool", **{n: n for n in SIGNED + UNSIGNED + FLOATING}}

int1 = dtype("int1")
int8, int16, int32, int64 = (dtype(n) for n in SIGNED)
uint8, uint16, uint32, uint64 = (dtype(n) for n in UNSIGNED)
float16, bfloat16, float32, float64 = (dtype(n) for n in FLOATING)
DTYPES = {d.name: d for d in (int1, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
                              float16, bfloat16, float32, float64)}


def from_numpy(np_dtype) -> dtype:
    """The language's dtype of a NumPy (or ml_dtypes) dtype."""
    name = "int1" if np.dtype(np_dtype) == np.bool_ else np.dtype(np_dtype).name
    return DTYPES[name]


class constexpr:
    """A value known when the kernel is compiled: as a parameter annotation (`BLOCK: tl.constexpr`)
    it makes the parameter part of the specialization key; `tl.constexpr(4)` wraps a value."""

    def __init__(self, value):
        self.value = unwrap(value)

    def __repr__(self) -> str:
        return f"constexpr[{self.value!r}]"

    def __index__(self):
        return self.value.__index__()

    def __bool__(self):
        return bool(self.value)

    def __eq__(self, other):
        return self.value == unwrap(other)

    def __hash__(self):
        return hash(self.value)


def unwrap(value):
    """value, or the value a constexpr wraps."""
    return value.value if isinstance(value, constexpr) else value
