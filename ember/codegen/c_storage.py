"""How C holds in memory each type it does not compute in as itself: one row per dtype.

    bool                 a byte (0 or 1); computed as a vector mask (lanes of -1 or 0)
    float16              _Float16; computed in float
    bfloat16             its bits (uint16_t: GCC 12 has no bfloat16); computed in float
    float8_*, float4_*   their bits in a byte (c_narrow); computed in float
    int4 uint4 int2 uint2  one value per byte; computed in int8 or uint8, wrapped to the width

A row says how a value crosses between memory and arithmetic, for a scalar and for a vector:
`load` (a stored scalar's computed value, with its C precedence), `store` (the stored form of a
computed scalar: what C converts by itself is left implicit), `lane` (one lane of a vector, from
a stored element), `widen` (a vector of stored elements to computed lanes) and `narrow` (back).
Every site of the C renderer and its prelude that moves such a value asks its row; the other
types' rows store them as they are computed. The helpers a row names (`to_float`, `wrap`, ...) are the
prelude's, written out the first time a kernel needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..tir import dtype as dt
from .cstyle import PRIMARY, UNARY, CStyleRenderer

if TYPE_CHECKING:
    from .c_prelude import CPrelude


@dataclass(frozen=True)
class Storage:
    held: str  # the C type of an element in memory
    load: Callable[[CPrelude, str], tuple[str, int]]
    store: Callable[[CPrelude, str], str]
    lane: Callable[[CPrelude, str], str]
    widen: Callable[[CPrelude, int, str], str]
    narrow: Callable[[CPrelude, int, str], str]


def _bits_float(elem: str, held: str) -> Storage:
    return Storage(
        held,
        load=lambda lib, x: (f"{lib.to_float(elem)}({x})", PRIMARY),
        store=lambda lib, x: f"{lib.from_float(elem)}({x})",
        lane=lambda lib, x: f"{lib.to_float(elem)}({x})",
        widen=lambda lib, n, x: f"{lib.widen(elem, n)}({x})",
        narrow=lambda lib, n, x: f"{lib.narrow(elem, n)}({x})",
    )


def _subbyte_int(elem: str) -> Storage:
    return Storage(
        "uint8_t",
        load=lambda lib, x: (f"{lib.wrap(elem, 1)}({x})", PRIMARY),
        store=lambda lib, x: f"{lib.truncate(elem, 1)}({x})",
        lane=lambda lib, x: f"{lib.wrap(elem, 1)}({x})",
        widen=lambda lib, n, x: f"{lib.wrap(elem, n)}(({lib.value_vec(elem, n)}){x})",
        narrow=lambda lib, n, x: f"{lib.truncate(elem, n)}({x})",
    )


def _as_computed(held: str) -> Storage:
    return Storage(held, load=lambda lib, x: (x, PRIMARY), store=lambda lib, x: x, lane=lambda lib, x: x,
                   widen=lambda lib, n, x: x, narrow=lambda lib, n, x: x)


STORAGE: dict[str, Storage] = {
    **{elem: _as_computed(held) for elem, held in CStyleRenderer.SCALAR_TYPES.items()},
    "bool": Storage(
        "bool",
        load=lambda lib, x: (x, PRIMARY),
        store=lambda lib, x: x,
        lane=lambda lib, x: f"-{x}",
        widen=lambda lib, n, x: f"{x} != 0",
        narrow=lambda lib, n, x: f"{x} & 1",
    ),
    "float16": Storage(
        "_Float16",
        load=lambda lib, x: (f"(float){x}", UNARY),
        store=lambda lib, x: x,
        lane=lambda lib, x: x,
        widen=lambda lib, n, x: f"__builtin_convertvector({x}, {lib.value_vec('float16', n)})",
        narrow=lambda lib, n, x: f"__builtin_convertvector({x}, {lib.vec('float16', n)})",
    ),
    "bfloat16": _bits_float("bfloat16", "uint16_t"),
    **{elem: _bits_float(elem, "uint8_t") for elem in dt.MINIFLOATS},
    **{elem: _subbyte_int(elem) for elem in dt.SUBBYTE_INTS},
}
HELD_AS_BITS = frozenset((*dt.BITS_FLOATS, *dt.SUBBYTE_INTS))  # data movement copies their bits
